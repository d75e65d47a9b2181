package qwen2

import (
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/mempo/mempo/model/sample"
	"github.com/mempo/mempo/model/torch"
	"github.com/mempo/mempo/model/torch/torchtest"
)

func testRequests(n int) []Request {
	rng := rand.New(rand.NewPCG(5, 6))
	var out []Request
	for i := range n {
		out = append(out, Request{Prompt: torchtest.RandomTokens(rng, 3+rng.IntN(12), 97), Seed: uint64(100 + i)})
	}
	return out
}

func generate(t *testing.T, m *Model, reqs []Request, cfg sample.Config) []Completion {
	t.Helper()
	out, err := m.Generate(reqs, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestBatchIndependence generates each request alone and inside batches of other
// compositions and sizes: tokens must be identical and sampling log-probs equal
// within 1e-5. It also logs the largest logit difference between a row decoded alone
// and in a batch, the floating-point effect Generate's comment describes.
func TestBatchIndependence(t *testing.T) {
	m := newTestModel(t, testConfig(), Options{})
	reqs := testRequests(6)
	cfg := sample.Config{Temperature: 1, TopP: 0.95, MaxNewTokens: 12}
	var alone []Completion
	for _, r := range reqs {
		alone = append(alone, generate(t, m, []Request{r}, cfg)[0])
	}
	batches := [][]int{{0, 1, 2, 3, 4, 5}, {5, 3, 1}, {2, 0}, {4, 2, 5, 0, 1, 3}}
	for _, idx := range batches {
		var sub []Request
		for _, i := range idx {
			sub = append(sub, reqs[i])
		}
		got := generate(t, m, sub, cfg)
		for j, i := range idx {
			if diff := cmp.Diff(alone[i].Tokens, got[j].Tokens); diff != "" {
				t.Errorf("batch %v: request %d tokens (-alone +batched):\n%s", idx, i, diff)
			}
			if d := torchtest.MaxAbsDiff(alone[i].LogProbs, got[j].LogProbs); d > 1e-5 {
				t.Errorf("batch %v: request %d: max |Δlogprob| = %g, want <= 1e-5", idx, i, d)
			}
		}
	}
	// Measure: last-token logits of request 0 alone vs in the full batch.
	solo := NewBatch([][]int64{reqs[0].Prompt}, []int{0}, nil, 0)
	var prompts [][]int64
	for _, r := range reqs {
		prompts = append(prompts, r.Prompt)
	}
	full := NewBatch(prompts, make([]int, len(reqs)), nil, 0)
	a := m.lastLogits(solo, nil, nil)
	b := m.lastLogits(full, nil, nil)[:m.Config.VocabSize]
	t.Logf("request 0 logits alone vs batch of %d: max |Δ| = %g", len(reqs), torchtest.MaxAbsDiff(a, b))
}

// sharedRequests is an agent's batch: 3 questions × 4 samples behind one 9-token
// system prompt, each question's samples either all at its first turn (identical
// prompts) or later with a memory and observation of their own; seeds differ per
// request.
func sharedRequests() []Request {
	rng := rand.New(rand.NewPCG(8, 9))
	system := torchtest.RandomTokens(rng, 9, 97)
	var out []Request
	for q := range 3 {
		question := torchtest.RandomTokens(rng, 2+3*q, 97)
		for s := range 4 {
			p := slices.Concat(system, question)
			if q > 0 {
				p = append(p, torchtest.RandomTokens(rng, 1+rng.IntN(6), 97)...)
			}
			out = append(out, Request{Prompt: p, Seed: uint64(200 + 4*q + s)})
		}
	}
	return out
}

// TestGenerateSharedPrefixes decodes requests that share prompt prefixes (the prefill
// runs each shared trunk once) and each request alone (no trunk): tokens identical and
// sampling log-probs within 1e-5. A trunk slot visible to the wrong row, or a branch at
// the wrong position, changes the logits far beyond that.
func TestGenerateSharedPrefixes(t *testing.T) {
	m := newTestModel(t, testConfig(), Options{})
	reqs := sharedRequests()
	var prompts [][]int64
	for _, r := range reqs {
		prompts = append(prompts, r.Prompt)
	}
	if trunks, _ := paddedTrunks(prompts); len(trunks) == 0 {
		t.Fatal("the fixture shares no prefix: the test would not exercise the trunks")
	}
	for _, cfg := range []sample.Config{{Temperature: 1, MaxNewTokens: 12}, {MaxNewTokens: 12}} {
		got := generate(t, m, reqs, cfg)
		for i, r := range reqs {
			alone := generate(t, m, []Request{r}, cfg)[0]
			if diff := cmp.Diff(alone.Tokens, got[i].Tokens); diff != "" {
				t.Errorf("T=%g request %d tokens (-alone +shared):\n%s", cfg.Temperature, i, diff)
			}
			if d := torchtest.MaxAbsDiff(alone.LogProbs, got[i].LogProbs); d > 1e-5 {
				t.Errorf("T=%g request %d: max |Δlogprob| = %g, want <= 1e-5", cfg.Temperature, i, d)
			}
		}
	}
}

// TestPaddedTrunks checks the prefill's grouping: identical prompts share all but
// their last token, one cut serves every group, a deep prefix two prompts share is
// not worth a wider trunk, and nothing is shared when it saves no slots.
func TestPaddedTrunks(t *testing.T) {
	seq := func(xs ...int64) []int64 { return xs }
	cases := []struct {
		name    string
		prompts [][]int64
		trunks  [][]int64
		of      []int
	}{
		{"identical", [][]int64{seq(1, 2, 3, 4), seq(1, 2, 3, 4), seq(1, 2, 3, 4)},
			[][]int64{seq(1, 2, 3)}, []int{0, 0, 0}},
		{"two questions", [][]int64{seq(1, 2, 5, 6, 7), seq(1, 2, 3, 4), seq(1, 2, 5, 6, 8), seq(1, 2, 3, 4)},
			// cut at 3: trunk (1 2 3) for the second question, (1 2 5) for the first
			[][]int64{seq(1, 2, 3), seq(1, 2, 5)}, []int{1, 0, 1, 0}},
		{"deep pair", [][]int64{seq(1, 2, 3, 4, 5, 6, 7, 8), seq(1, 2, 3, 4, 5, 6, 7, 9), seq(1, 2, 9, 9, 9, 9, 9, 9), seq(1, 2, 8, 8, 8, 8, 8, 8)},
			[][]int64{seq(1, 2)}, []int{0, 0, 0, 0}},
		{"nothing shared", [][]int64{seq(1, 2), seq(3, 4), seq(1, 5)}, nil, []int{-1, -1, -1}},
		{"one prompt", [][]int64{seq(1, 2, 3)}, nil, []int{-1}},
		{"a prompt the others extend", [][]int64{seq(1, 2, 3, 4), seq(1, 2, 3, 4, 5), seq(1, 2, 3, 4, 6), seq(1, 2, 3, 4, 7)},
			// a trunk of 4 leaves the first prompt whole (4 + 4·4 slots); one of 3 serves all
			[][]int64{seq(1, 2, 3)}, []int{0, 0, 0, 0}},
	}
	for _, c := range cases {
		trunks, of := paddedTrunks(c.prompts)
		if diff := cmp.Diff(c.trunks, trunks); diff != "" {
			t.Errorf("%s: trunks (-want +got):\n%s", c.name, diff)
		}
		if diff := cmp.Diff(c.of, of); diff != "" {
			t.Errorf("%s: of (-want +got):\n%s", c.name, diff)
		}
	}
}

// TestSamplingLogProbsMatchScoring compares the log-probs recorded while decoding
// through the KV cache with LogProbs over (prompt, completion) in one forward pass.
// Tolerance 1e-4: different reduction orders in float32.
func TestSamplingLogProbsMatchScoring(t *testing.T) {
	m := newTestModel(t, testConfig(), Options{})
	reqs := testRequests(4)
	for _, temp := range []float64{1, 0.7} {
		gen := generate(t, m, reqs, sample.Config{Temperature: temp, MaxNewTokens: 10})
		var pairs []Pair
		for i, c := range gen {
			pairs = append(pairs, Pair{Context: reqs[i].Prompt, Response: c.Tokens})
		}
		scored, err := m.LogProbs(pairs, ScoreConfig{Temperature: temp, Chunk: 7})
		if err != nil {
			t.Fatal(err)
		}
		for i := range gen {
			if d := torchtest.MaxAbsDiff(gen[i].LogProbs, scored[i].LogProbs); d > 1e-4 {
				t.Errorf("T=%g request %d: max |Δlogprob| decode vs forward = %g, want <= 1e-4", temp, i, d)
			}
		}
	}
}

func TestGenerateStopAndLength(t *testing.T) {
	m := newTestModel(t, testConfig(), Options{})
	req := testRequests(1)
	greedy := sample.Config{MaxNewTokens: 10}
	free := generate(t, m, req, greedy)[0]
	if len(free.Tokens) != 10 || free.Finish != FinishLength {
		t.Fatalf("greedy run: %d tokens, finish %q; want 10, length", len(free.Tokens), free.Finish)
	}
	stop := free.Tokens[4:6]
	// Generation stops right after the first occurrence of the stop sequence.
	end := 6
	for k := 2; k <= 6; k++ {
		if slices.Equal(free.Tokens[k-2:k], stop) {
			end = k
			break
		}
	}
	greedy.Stop = [][]int64{{96, 96, 96}, slices.Clone(stop)}
	got := generate(t, m, req, greedy)[0]
	if diff := cmp.Diff(free.Tokens[:end], got.Tokens); diff != "" || got.Finish != FinishStop {
		t.Errorf("with stop %v: finish %q, tokens (-want +got):\n%s", stop, got.Finish, diff)
	}
	// The context limit ends generation too: 64 positions, prompt of 60.
	long := []Request{{Prompt: torchtest.RandomTokens(rand.New(rand.NewPCG(1, 1)), 60, 97)}}
	got = generate(t, m, long, sample.Config{MaxNewTokens: 10})[0]
	if len(got.Tokens) != 4 || got.Finish != FinishLength {
		t.Errorf("prompt 60 of 64 positions: %d tokens, finish %q; want 4, length", len(got.Tokens), got.Finish)
	}
}

func TestGenerateErrors(t *testing.T) {
	m := newTestModel(t, testConfig(), Options{})
	cfg := sample.Config{MaxNewTokens: 4}
	tests := []struct {
		name string
		reqs []Request
		cfg  sample.Config
		want string
	}{
		{"prompt too long", []Request{{Prompt: make([]int64, 64)}}, cfg, "max_position_embeddings 64"},
		{"token outside vocab", []Request{{Prompt: []int64{1, 97}}}, cfg, "vocab mismatch"},
		{"empty prompt", []Request{{Prompt: []int64{1}}, {}}, cfg, "request 1: empty prompt"},
		{"bad sampling", []Request{{Prompt: []int64{1}}}, sample.Config{}, "max_new_tokens"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := m.Generate(tt.reqs, tt.cfg)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Generate() = %v, want error containing %q", err, tt.want)
			}
		})
	}
}

// TestLogProbsMatchFullSoftmax checks the chunked selective log-softmax against
// log-softmax and entropy computed on the host in float64 from full logits (1e-4),
// for several chunk sizes and token budgets (which change batch composition).
func TestLogProbsMatchFullSoftmax(t *testing.T) {
	m := newTestModel(t, testConfig(), Options{})
	rng := rand.New(rand.NewPCG(8, 9))
	var pairs []Pair
	for range 5 {
		pairs = append(pairs, Pair{Context: torchtest.RandomTokens(rng, 1+rng.IntN(8), 97), Response: torchtest.RandomTokens(rng, rng.IntN(9), 97)})
	}
	var want [][]float64
	var wantEnt [][]float64
	for _, p := range pairs {
		seq := append(slices.Clone(p.Context), p.Response...)
		logits := fullLogits(m, seq)
		var lp, ent []float64
		for j, tok := range p.Response {
			row := logits[len(p.Context)-1+j]
			mx := float64(slices.Max(row))
			s, sl := 0.0, 0.0
			for _, l := range row {
				e := math.Exp(float64(l) - mx)
				s += e
				sl += e * float64(l)
			}
			lse := mx + math.Log(s)
			lp = append(lp, float64(row[tok])-lse)
			ent = append(ent, lse-sl/s)
		}
		want = append(want, lp)
		wantEnt = append(wantEnt, ent)
	}
	for _, cfg := range []ScoreConfig{{Chunk: 1, Entropy: true}, {Chunk: 5, TokenBudget: 20, Entropy: true}, {Chunk: 1000, TokenBudget: 1}} {
		base := liveTensors()
		got, err := m.LogProbs(pairs, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if n := liveTensors(); n != base {
			t.Errorf("LogProbs(%+v) left %d live tensors, want %d", cfg, n, base)
		}
		for i := range pairs {
			if len(got[i].LogProbs) != len(want[i]) {
				t.Fatalf("pair %d: %d log-probs, want %d", i, len(got[i].LogProbs), len(want[i]))
			}
			for j := range want[i] {
				if d := math.Abs(float64(got[i].LogProbs[j]) - want[i][j]); d > 1e-4 {
					t.Errorf("%+v pair %d token %d: logprob %g, want %g", cfg, i, j, got[i].LogProbs[j], want[i][j])
				}
				if cfg.Entropy {
					if d := math.Abs(float64(got[i].Entropy[j]) - wantEnt[i][j]); d > 1e-4 {
						t.Errorf("%+v pair %d token %d: entropy %g, want %g", cfg, i, j, got[i].Entropy[j], wantEnt[i][j])
					}
				} else if got[i].Entropy != nil {
					t.Errorf("pair %d: entropy returned without Entropy", i)
				}
			}
		}
	}
}

func TestLogProbsErrors(t *testing.T) {
	m := newTestModel(t, testConfig(), Options{})
	tests := []struct {
		name string
		pair Pair
		want string
	}{
		{"empty context", Pair{Response: []int64{1}}, "pair 0: empty context"},
		{"too long", Pair{Context: make([]int64, 40), Response: make([]int64, 25)}, "65 tokens exceed max_position_embeddings 64"},
		{"vocab", Pair{Context: []int64{1}, Response: []int64{-1}}, "response: token -1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := m.LogProbs([]Pair{tt.pair}, ScoreConfig{})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("LogProbs() = %v, want error containing %q", err, tt.want)
			}
		})
	}
}

// TestNoTensorLeaks runs generation and scoring repeatedly: gotch's count of live
// tensors must return to its baseline after each call.
func TestNoTensorLeaks(t *testing.T) {
	m := newTestModel(t, testConfig(), Options{})
	reqs := testRequests(3)
	base := liveTensors()
	for i := range 3 {
		gen := generate(t, m, reqs, sample.Config{Temperature: 1, TopK: 20, MaxNewTokens: 6, Stop: [][]int64{{3}}})
		if n := liveTensors(); n != base {
			t.Fatalf("after Generate #%d: %d live tensors, want %d", i, n, base)
		}
		lp, ent, err := m.LogProbTensor([]Pair{{Context: reqs[0].Prompt, Response: gen[0].Tokens}}, ScoreConfig{Entropy: true})
		if err != nil {
			t.Fatal(err)
		}
		torch.Drop(lp, ent)
		if n := liveTensors(); n != base {
			t.Fatalf("after LogProbTensor #%d: %d live tensors, want %d", i, n, base)
		}
	}
}

// TestGenerateNaN: a model whose logits are NaN fails with an error naming the
// logit, under greedy and nucleus sampling alike, and frees its tensors.
func TestGenerateNaN(t *testing.T) {
	m := newTestModel(t, testConfig(), Options{})
	n := m.Norm.Weight.MustSize()[0]
	nan := make([]float32, n)
	for i := range nan {
		nan[i] = float32(math.NaN())
	}
	set(t, m.Norm.Weight, nan)
	base := liveTensors()
	for _, cfg := range []sample.Config{{MaxNewTokens: 3}, {Temperature: 1, TopP: 0.9, MaxNewTokens: 3}} {
		_, err := m.Generate(testRequests(3), cfg)
		if err == nil || !strings.Contains(err.Error(), "is NaN") {
			t.Errorf("Generate(%+v) with NaN logits = %v, want an error naming the NaN logit", cfg, err)
		}
		if got := liveTensors(); got != base {
			t.Errorf("Generate(%+v) left %d live tensors, want %d", cfg, got, base)
		}
	}
}

// TestGenerateUnderCollector decodes agent-shaped batches whose rows leave at different
// steps (a fifth of the vocabulary stops a row, so the cache drops rows often), in
// float32 and bfloat16, once quietly and once while another goroutine runs the garbage
// collector and hands gotch tensors to their finalizers, which free handles on other
// threads: the tokens and log-probs must be identical. A handle freed early or twice
// shows here as a crash or changed tokens, and under build/asan.sh as a report at its
// first use; MEMPO_STRESS_ROUNDS lengthens the run for that.
func TestGenerateUnderCollector(t *testing.T) {
	rounds := 2
	if s := os.Getenv("MEMPO_STRESS_ROUNDS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("MEMPO_STRESS_ROUNDS=%q, want a positive count", s)
		}
		rounds = n
	}
	var stops [][]int64
	for tok := range int64(20) {
		stops = append(stops, []int64{tok})
	}
	cfg := sample.Config{Temperature: 1, MaxNewTokens: 24, Stop: stops}
	for _, dt := range []string{"float32", "bfloat16"} {
		m := newTestModel(t, testConfig(), Options{DType: dt})
		rng := rand.New(rand.NewPCG(3, 4))
		for r := range rounds {
			reqs := sharedRequests()
			for i := range reqs {
				reqs[i].Prompt = append(reqs[i].Prompt, torchtest.RandomTokens(rng, rng.IntN(8), 97)...)
				reqs[i].Seed += uint64(1000 * r)
			}
			quiet := generate(t, m, reqs, cfg)
			lengths := map[int]bool{}
			for _, c := range quiet {
				lengths[len(c.Tokens)] = true
			}
			if len(lengths) < 3 {
				t.Fatalf("%s round %d: completions of %d distinct lengths; the test needs rows leaving at several steps", dt, r, len(lengths))
			}
			stop := torchtest.CollectorPressure()
			loud := generate(t, m, reqs, cfg)
			stop()
			for i := range reqs {
				if diff := cmp.Diff(quiet[i].Tokens, loud[i].Tokens); diff != "" {
					t.Fatalf("%s round %d request %d: tokens changed under the collector (-quiet +loud):\n%s", dt, r, i, diff)
				}
				if !slices.Equal(quiet[i].LogProbs, loud[i].LogProbs) {
					t.Fatalf("%s round %d request %d: log-probs changed under the collector", dt, r, i)
				}
			}
		}
	}
}

// TestGeneratePast runs three turns of four sequences, each turn's prompt the last
// turn's prompt, its completion and a few new tokens (an agent keeping its whole
// context): once from the whole prompt each turn and once from the last turn's Past.
// Tokens must be identical and log-probs within 1e-5; a reused slot at the wrong
// position or visible to the wrong row changes them far beyond that. The Past holds
// exactly the tokens fed, a prompt that departs from it reuses only the common part,
// and every tensor is freed.
func TestGeneratePast(t *testing.T) {
	m := newTestModel(t, testConfig(), Options{})
	rng := rand.New(rand.NewPCG(11, 12))
	base := liveTensors()
	for _, cfg := range []sample.Config{{Temperature: 1, MaxNewTokens: 8, Stop: [][]int64{{7}}}, {MaxNewTokens: 8}} {
		reqs := testRequests(4)
		pasts := make([]*Past, len(reqs))
		for turn := range 3 {
			whole := generate(t, m, reqs, cfg)
			with := slices.Clone(reqs)
			for i := range with {
				with[i].Past, with[i].KeepPast = pasts[i], true
			}
			if turn > 0 && !hasPast(with) {
				t.Fatalf("turn %d: no request reuses its Past", turn)
			}
			got := generate(t, m, with, cfg)
			for i := range reqs {
				if diff := cmp.Diff(whole[i].Tokens, got[i].Tokens); diff != "" {
					t.Errorf("T=%g turn %d request %d tokens (-whole +past):\n%s", cfg.Temperature, turn, i, diff)
				}
				if d := torchtest.MaxAbsDiff(whole[i].LogProbs, got[i].LogProbs); d > 1e-5 {
					t.Errorf("T=%g turn %d request %d: max |Δlogprob| = %g, want <= 1e-5", cfg.Temperature, turn, i, d)
				}
				if whole[i].Past != nil {
					t.Errorf("turn %d request %d: a Past nobody asked for", turn, i)
				}
				p := got[i].Past
				if want := len(reqs[i].Prompt) + len(got[i].Tokens) - 1; p == nil || p.Len() != want {
					t.Fatalf("turn %d request %d: Past of %v tokens, want %d", turn, i, p, want)
				}
				pasts[i].Drop()
				pasts[i] = p
				next := slices.Concat(reqs[i].Prompt, got[i].Tokens, torchtest.RandomTokens(rng, 2+rng.IntN(5), 97))
				if i == 3 { // a context that departs from the last one after its first tokens
					next = slices.Concat(reqs[i].Prompt[:2], torchtest.RandomTokens(rng, 6, 97))
				}
				if n, want := p.reuse(next), min(p.Len(), len(next)-1); i < 3 && n != want {
					t.Errorf("turn %d request %d: reuses %d slots, want %d", turn, i, n, want)
				}
				reqs[i].Prompt = next
			}
		}
		for _, p := range pasts {
			p.Drop()
		}
	}
	if n := liveTensors(); n != base {
		t.Errorf("%d live tensors after dropping every Past, want %d", n, base)
	}
}
