package engine

import (
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/mempo/mempo/model/qwen2"
	"github.com/mempo/mempo/model/sample"
	"github.com/mempo/mempo/model/torch/torchtest"
)

// engineCase is a sequence of TestEngineMatchesGenerate and the decode step at
// which it joins.
type engineCase struct {
	seq  Sequence
	join int
}

func engineCases() []engineCase {
	rng := rand.New(rand.NewPCG(11, 12))
	settings := []sample.Config{
		{MaxNewTokens: 9}, // greedy
		{Temperature: 1, TopP: 0.95, MaxNewTokens: 14}, // nucleus
		{Temperature: 0.7, TopK: 20, MaxNewTokens: 6},  // top-k
		{Temperature: 1.3, MaxNewTokens: 1},            // done at its first token
		{Temperature: 1, MaxNewTokens: 20, Stop: [][]int64{{5}, {7, 8}}},
	}
	var out []engineCase
	for i := range 10 {
		out = append(out, engineCase{
			seq:  Sequence{Request: qwen2.Request{Prompt: torchtest.RandomTokens(rng, 2+rng.IntN(20), 97), Seed: uint64(300 + i)}, Sampling: settings[i%len(settings)]},
			join: []int{0, 0, 1, 3, 3, 4, 7, 8, 8, 15}[i],
		})
	}
	// A prompt that reaches max_position_embeddings (64) before max_tokens.
	out[6].seq.Prompt = torchtest.RandomTokens(rng, 58, 97)
	out[6].seq.Sampling = sample.Config{Temperature: 1, MaxNewTokens: 20}
	return out
}

// runEngine adds each case from its step on, as soon as it fits (in case order),
// steps until every sequence has finished and returns the completions in case
// order, with the most rows one step decoded and how many sequences joined rows
// already running; cancel names cases to cancel two steps after they join.
func runEngine(t *testing.T, e *Engine, cases []engineCase, cancel map[int]bool) (out []qwen2.Completion, widest, joined int) {
	t.Helper()
	out = make([]qwen2.Completion, len(cases))
	ids := map[int]int{}
	cancelAt := map[int][]int{}
	next := 0
	for step := 0; step < 200; step++ {
		for ; next < len(cases) && cases[next].join <= step && e.Fits(cases[next].seq); next++ {
			id, err := e.Add(cases[next].seq)
			if err != nil {
				t.Fatalf("step %d: Add(case %d) = %v", step, next, err)
			}
			ids[id] = next
			if cancel[next] {
				cancelAt[step+2] = append(cancelAt[step+2], id)
			}
		}
		for _, id := range cancelAt[step] {
			e.Cancel(id)
			delete(ids, id)
		}
		if len(e.rows) > 0 {
			joined += len(e.pending)
		}
		done, err := e.Step()
		if err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		widest = max(widest, len(e.rows))
		if n := len(e.rows); n > 1 && n*e.dec.Cap() > e.cfg.TokenBudget {
			t.Errorf("step %d: %d rows of %d slots, over the token budget %d", step, n, e.dec.Cap(), e.cfg.TokenBudget)
		}
		for _, f := range done {
			i, ok := ids[f.ID]
			if !ok {
				t.Fatalf("step %d: Step reported ID %d, which is not held", step, f.ID)
			}
			out[i] = f.Completion
			delete(ids, f.ID)
		}
		if len(ids) == 0 && next == len(cases) {
			if e.Len() != 0 {
				t.Errorf("engine holds %d sequences after all finished, want 0", e.Len())
			}
			return out, widest, joined
		}
	}
	t.Fatalf("sequences %v still running after 200 steps", ids)
	return nil, 0, 0
}

// TestEngineMatchesGenerate runs sequences of different sampling settings, prompt
// lengths and lengths through one engine, joining at different steps, and compares
// each with Generate of that sequence alone: identical tokens and finish reasons,
// log-probs within 1e-5 (the floating-point caveat of Generate). A cancelled
// neighbour changes nothing, and every tensor is freed at the end.
func TestEngineMatchesGenerate(t *testing.T) {
	m := newTestModel(t, testConfig(), qwen2.Options{})
	cases := engineCases()
	want := make([]qwen2.Completion, len(cases))
	for i, c := range cases {
		want[i] = generate(t, m, []qwen2.Request{c.seq.Request}, c.seq.Sampling)[0]
	}
	for _, tt := range []struct {
		name   string
		cfg    Config
		cancel map[int]bool
		rows   int // rows one step should reach
	}{
		{"default", DefaultConfig(), nil, 5},
		{"three rows", Config{MaxRows: 3, TokenBudget: 1 << 20}, nil, 3},
		{"tight budget", Config{MaxRows: 64, TokenBudget: 150}, nil, 3},
		{"cancel", DefaultConfig(), map[int]bool{1: true, 4: true}, 4},
	} {
		t.Run(tt.name, func(t *testing.T) {
			live := liveTensors()
			e, err := New(m, tt.cfg)
			if err != nil {
				t.Fatal(err)
			}
			got, widest, joined := runEngine(t, e, cases, tt.cancel)
			if widest != tt.rows || joined < 4 {
				t.Errorf("at most %d rows in a step, %d joins into a running batch; want %d rows and at least 4 joins", widest, joined, tt.rows)
			}
			worst := 0.0
			for i := range cases {
				if tt.cancel[i] {
					continue
				}
				if diff := cmp.Diff(want[i].Tokens, got[i].Tokens); diff != "" || got[i].Finish != want[i].Finish {
					t.Errorf("case %d: finish %q, want %q; tokens (-alone +engine):\n%s", i, got[i].Finish, want[i].Finish, diff)
				}
				d := torchtest.MaxAbsDiff(want[i].LogProbs, got[i].LogProbs)
				if d > 1e-5 {
					t.Errorf("case %d: max |Δlogprob| = %g, want <= 1e-5", i, d)
				}
				worst = max(worst, d)
			}
			t.Logf("max |Δlogprob| engine vs alone: %g; up to %d rows a step, %d joins into a running batch", worst, widest, joined)
			e.Close()
			if n := liveTensors(); n != live {
				t.Errorf("live tensors %d after Close, want %d", n, live)
			}
		})
	}
}

// TestEngineAloneExact: a sequence decoded alone in an engine is Generate's, log-
// probs to the bit (the same forward calls on the same shapes).
func TestEngineAloneExact(t *testing.T) {
	m := newTestModel(t, testConfig(), qwen2.Options{})
	e, err := New(m, Config{MaxRows: 1, TokenBudget: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	for i, c := range engineCases() {
		want := generate(t, m, []qwen2.Request{c.seq.Request}, c.seq.Sampling)[0]
		c.join = 0
		done, _, _ := runEngine(t, e, []engineCase{c}, nil)
		got := done[0]
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("case %d (-Generate +engine):\n%s", i, diff)
		}
	}
}

// TestEngineLimits: Fits and Add keep the running batch within MaxRows and the
// token budget, and an empty engine takes any sequence.
func TestEngineLimits(t *testing.T) {
	m := newTestModel(t, testConfig(), qwen2.Options{})
	seq := func(prompt, maxNew int) Sequence {
		return Sequence{Request: qwen2.Request{Prompt: make([]int64, prompt)}, Sampling: sample.Config{MaxNewTokens: maxNew}}
	}
	// Two rows of 10 + 9 tokens need 2 × (10 + 9) = 38 slots.
	e, err := New(m, Config{MaxRows: 2, TokenBudget: 38})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if _, err := e.Add(seq(40, 20)); err != nil {
		t.Fatalf("Add to an empty engine = %v, want success beyond the budget", err)
	}
	e.Close()
	if _, err := e.Add(seq(10, 10)); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		seq  Sequence
		want bool
	}{
		{"within budget", seq(10, 10), true},
		{"one slot over", seq(11, 10), false},
		{"room for max_tokens", seq(2, 18), false},
	} {
		if got := e.Fits(tt.seq); got != tt.want {
			t.Errorf("%s: Fits = %v, want %v", tt.name, got, tt.want)
		}
	}
	if _, err := e.Add(seq(11, 10)); !errors.Is(err, ErrFull) {
		t.Errorf("Add over the budget = %v, want ErrFull", err)
	}
	if _, err := e.Add(seq(10, 10)); err != nil {
		t.Fatal(err)
	}
	if used, total := e.Slots(); used != 38 || total != 38 {
		t.Errorf("Slots = %d of %d with two rows of 10 + 9, want 38 of 38", used, total)
	}
	if _, err := e.Add(seq(1, 1)); !errors.Is(err, ErrFull) {
		t.Errorf("Add of a third row = %v, want ErrFull (max_rows 2)", err)
	}
	for _, tt := range []struct {
		name string
		seq  Sequence
		want string
	}{
		{"empty prompt", seq(0, 1), "empty prompt"},
		{"prompt too long", seq(64, 1), "max_position_embeddings 64"},
		{"bad sampling", seq(1, 0), "max_new_tokens"},
		{"keeps a past", Sequence{Request: qwen2.Request{Prompt: []int64{1}, KeepPast: true}, Sampling: sample.Config{MaxNewTokens: 1}}, "Generate's"},
	} {
		e.Close()
		if _, err := e.Add(tt.seq); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: Add = %v, want an error containing %q", tt.name, err, tt.want)
		}
	}
	if _, err := New(m, Config{MaxRows: 0, TokenBudget: 1}); !errors.Is(err, ErrConfig) {
		t.Errorf("New(max_rows 0) = %v, want ErrConfig", err)
	}
}

// TestEngineUnderCollector runs the engine cases (rows joining and leaving, the running
// cache repacked as they do) in float32 and bfloat16, once quietly and once while
// another goroutine runs the garbage collector and hands gotch tensors to their
// finalizers (torchtest.CollectorPressure): the completions must be identical. See
// TestGenerateUnderCollector.
func TestEngineUnderCollector(t *testing.T) {
	for _, dt := range []string{"float32", "bfloat16"} {
		m := newTestModel(t, testConfig(), qwen2.Options{DType: dt})
		run := func() []qwen2.Completion {
			e, err := New(m, DefaultConfig())
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			out, _, _ := runEngine(t, e, engineCases(), nil)
			return out
		}
		quiet := run()
		stop := torchtest.CollectorPressure()
		loud := run()
		stop()
		for i := range quiet {
			if diff := cmp.Diff(quiet[i], loud[i]); diff != "" {
				t.Errorf("%s case %d: completion changed under the collector (-quiet +loud):\n%s", dt, i, diff)
			}
		}
	}
}

// TestEnginePrefixCache runs an agent's two turns and another sample of its prompt
// through an engine that stores prefixes: the second turn (its prompt the first's
// prompt, completion and an observation) and the other sample each prefill from the
// stored keys and values, their completions equal Generate's for them alone (tokens
// identical, log-probs within 1e-5), a turn's prefix supersedes its last turn's, a
// prefix over the budget is not stored, and Close frees everything.
func TestEnginePrefixCache(t *testing.T) {
	m := newTestModel(t, testConfig(), qwen2.Options{})
	base := liveTensors()
	rng := rand.New(rand.NewPCG(21, 22))
	e, err := New(m, Config{MaxRows: 4, TokenBudget: 1 << 12, PrefixCache: 200})
	if err != nil {
		t.Fatal(err)
	}
	run := func(s Sequence) qwen2.Completion {
		t.Helper()
		id, err := e.Add(s)
		if err != nil {
			t.Fatal(err)
		}
		for e.Len() > 0 {
			done, err := e.Step()
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range done {
				if f.ID == id {
					alone := generate(t, m, []qwen2.Request{s.Request}, s.Sampling)[0]
					if diff := cmp.Diff(alone.Tokens, f.Tokens); diff != "" {
						t.Errorf("prompt of %d tokens: tokens (-alone +engine):\n%s", len(s.Prompt), diff)
					}
					if d := torchtest.MaxAbsDiff(alone.LogProbs, f.LogProbs); d > 1e-5 {
						t.Errorf("prompt of %d tokens: max |Δlogprob| = %g, want <= 1e-5", len(s.Prompt), d)
					}
					return f.Completion
				}
			}
		}
		t.Fatal("the sequence never finished")
		return qwen2.Completion{}
	}
	greedy := sample.Config{MaxNewTokens: 6}
	prompt := torchtest.RandomTokens(rng, 20, 97)
	first := run(Sequence{Request: qwen2.Request{Prompt: prompt, Seed: 1}, Sampling: greedy})
	held := len(prompt) + len(first.Tokens) - 1
	if st := e.PrefixStats(); st != (PrefixStats{Held: held}) {
		t.Fatalf("after the first turn: %+v, want %d tokens held and no hit", st, held)
	}
	next := slices.Concat(prompt, first.Tokens, torchtest.RandomTokens(rng, 7, 97))
	second := run(Sequence{Request: qwen2.Request{Prompt: next, Seed: 2}, Sampling: greedy})
	want := PrefixStats{Hits: 1, Reused: held, Held: len(next) + len(second.Tokens) - 1}
	if st := e.PrefixStats(); st != want {
		t.Fatalf("after the second turn: %+v, want %+v (the first turn's prefix reused, then superseded)", st, want)
	}
	run(Sequence{Request: qwen2.Request{Prompt: prompt, Seed: 3}, Sampling: sample.Config{Temperature: 1, MaxNewTokens: 6}})
	if st := e.PrefixStats(); st.Hits != 2 || st.Reused != held+len(prompt)-1 {
		t.Errorf("another sample of the prompt: %+v, want a second hit reusing all but its last prompt token", st)
	}
	e.Close()
	if st := e.PrefixStats(); st.Held != 0 {
		t.Errorf("after Close: %d tokens held", st.Held)
	}

	small, err := New(m, Config{MaxRows: 4, TokenBudget: 1 << 12, PrefixCache: 10})
	if err != nil {
		t.Fatal(err)
	}
	e = small
	run(Sequence{Request: qwen2.Request{Prompt: prompt, Seed: 1}, Sampling: greedy})
	if st := e.PrefixStats(); st != (PrefixStats{}) {
		t.Errorf("a prefix over the budget: %+v, want nothing held", st)
	}
	e.Close()
	if _, err := New(m, Config{MaxRows: 1, TokenBudget: 1, PrefixCache: -1}); !errors.Is(err, ErrConfig) {
		t.Errorf("New(prefix_cache -1) = %v, want ErrConfig", err)
	}
	if n := liveTensors(); n != base {
		t.Errorf("%d live tensors after Close, want %d", n, base)
	}
}
