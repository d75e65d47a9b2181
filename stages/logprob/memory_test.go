package logprob

import (
	"math"
	"path/filepath"
	"runtime"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/mempo/mempo/format"
	"github.com/mempo/mempo/jobs"
	"github.com/mempo/mempo/model/bpe"
	"github.com/mempo/mempo/model/qwen2"
	"github.com/mempo/mempo/model/torch/torchtest"
	"github.com/sugarme/gotch/ts"
)

// separatePairs is the memory pass as MemPO's reference code runs it: one sequence
// per memory turn for P_mem and another for P_full, each re-reading its whole context.
// It returns the pairs and, per pair, the row it belongs to and whether it is P_full.
func separatePairs(trajs [][]format.Rollout, targets map[string]target) (pairs []qwen2.Pair, rows []int, full []bool, from []int) {
	base := 0
	for _, tr := range trajs {
		tg := targets[tr[0].UID]
		prompt := qwen2.Tokens(tr[0].PromptIDs)
		hist := slices.Clone(prompt)
		for t, r := range tr {
			if hasMemory(&r) {
				mem := append(slices.Clone(prompt), qwen2.Tokens(r.ResponseIDs[r.MemStart:r.MemEnd])...)
				pairs = append(pairs, qwen2.Pair{Context: mem, Response: tg.ids}, qwen2.Pair{Context: slices.Clone(hist), Response: tg.ids})
				rows = append(rows, base+t, base+t)
				full = append(full, false, true)
				from = append(from, tg.from, tg.from)
			}
			hist = append(hist, qwen2.Tokens(r.ResponseIDs)...)
			hist = append(hist, qwen2.Tokens(r.ObservationIDs)...)
		}
		base += len(tr)
	}
	return pairs, rows, full, from
}

// separateMemory computes p_mem and p_full of every row with separate forwards.
func separateMemory(t testing.TB, m *qwen2.Model, rows []format.Rollout, targets map[string]target) (pMem, pFull []*float32) {
	t.Helper()
	trajs, err := format.Trajectories(rows)
	if err != nil {
		t.Fatal(err)
	}
	pairs, at, full, from := separatePairs(trajs, targets)
	scored, err := m.LogProbs(pairs, qwen2.ScoreConfig{})
	if err != nil {
		t.Fatal(err)
	}
	pMem, pFull = make([]*float32, len(rows)), make([]*float32, len(rows))
	for i := range pairs {
		v := float32(geoMean(scored[i].LogProbs[from[i]:]))
		if full[i] {
			pFull[at[i]] = &v
		} else {
			pMem[at[i]] = &v
		}
	}
	return pMem, pFull
}

func testTargets(t testing.TB, tok *bpe.Tokenizer) map[string]target {
	t.Helper()
	out := map[string]target{}
	for _, q := range questions {
		tg, err := answerTarget(tok, DefaultConfig(), q.golds)
		if err != nil {
			t.Fatal(err)
		}
		out[q.uid] = tg
	}
	return out
}

func TestAnswerTarget(t *testing.T) {
	tok := newTokenizer(t)
	tg, err := answerTarget(tok, DefaultConfig(), [][]string{{"paris", "Paris, France"}, {"oslo"}})
	if err != nil {
		t.Fatal(err)
	}
	open, _ := tok.ID("<answer>")
	want := append([]int64{int64(open)}, qwen2.Tokens(tok.Encode("paris; oslo"))...)
	if diff := cmp.Diff(want, tg.ids); diff != "" || tg.from != 1 {
		t.Errorf("answerTarget: from %d, ids (-want +got):\n%s", tg.from, diff)
	}
	// A probe is teacher-forced before the tag and not scored.
	cfg := DefaultConfig()
	cfg.Probe = "<think>done</think>"
	tg, err = answerTarget(tok, cfg, [][]string{{"paris"}, {"oslo"}})
	if err != nil {
		t.Fatal(err)
	}
	lead := qwen2.Tokens(tok.Encode("<think>done</think><answer>"))
	want = append(slices.Clone(lead), qwen2.Tokens(tok.Encode("paris; oslo"))...)
	if diff := cmp.Diff(want, tg.ids); diff != "" || tg.from != len(lead) {
		t.Errorf("answerTarget with a probe: from %d, want %d; ids (-want +got):\n%s", tg.from, len(lead), diff)
	}
	for _, golds := range [][][]string{nil, {{}}, {{"paris"}, {""}}} {
		if _, err := answerTarget(tok, DefaultConfig(), golds); err == nil {
			t.Errorf("answerTarget(%q) = nil error, want one", golds)
		}
	}
}

// TestPlanMemory checks the layout on two samples of one question: P_full trunks stop
// at the last memory turn's history, copies sit at each turn's history length, and
// the samples' memories share one P_mem trunk.
func TestPlanMemory(t *testing.T) {
	tg := target{ids: []int64{90, 91, 92}, from: 1}
	roll := func(s, turn int32, resp, obs []int32, mem [2]int32) format.Rollout {
		return format.Rollout{UID: "q", Sample: s, Turn: turn, PromptIDs: []int32{1, 2}, ResponseIDs: resp,
			ObservationIDs: obs, MemStart: mem[0], MemEnd: mem[1]}
	}
	trajs := [][]format.Rollout{
		{roll(0, 0, []int32{10, 11, 12}, []int32{20}, [2]int32{0, 2}), roll(0, 1, []int32{13, 14}, []int32{21, 22}, [2]int32{1, 2}),
			roll(0, 2, []int32{15}, nil, [2]int32{})},
		{roll(1, 0, []int32{30}, []int32{40}, [2]int32{})},
		{roll(2, 0, []int32{50, 51}, nil, [2]int32{0, 1})},
	}
	p, err := planMemory("shard", trajs, map[string]target{"q": tg}, 100, true)
	if err != nil {
		t.Fatal(err)
	}
	wantFull := []qwen2.Tree{
		{Trunk: []int64{1, 2, 10, 11, 12, 20}, Branches: []qwen2.Branch{{Prefix: 2, IDs: tg.ids, From: 1}, {Prefix: 6, IDs: tg.ids, From: 1}}},
		{Trunk: []int64{1, 2}, Branches: []qwen2.Branch{{Prefix: 2, IDs: tg.ids, From: 1}}},
	}
	wantMem := []qwen2.Tree{{Trunk: []int64{1, 2}, Branches: []qwen2.Branch{
		{Prefix: 2, IDs: []int64{10, 11, 90, 91, 92}, From: 3},
		{Prefix: 2, IDs: []int64{14, 90, 91, 92}, From: 2},
		{Prefix: 2, IDs: []int64{50, 90, 91, 92}, From: 2},
	}}}
	if diff := cmp.Diff(wantFull, p.full); diff != "" {
		t.Errorf("P_full trees (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([][]int{{0, 1}, {4}}, p.fullRow); diff != "" {
		t.Errorf("P_full rows (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(wantMem, p.mem); diff != "" {
		t.Errorf("P_mem trees (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([][]int{{0, 1, 4}}, p.memRow); diff != "" {
		t.Errorf("P_mem rows (-want +got):\n%s", diff)
	}
	if _, err := planMemory("shard", trajs, map[string]target{"q": tg}, 8, true); err == nil {
		t.Errorf("planMemory with 8 positions = nil error, want ErrContext for the 6-token history + 3-token answer")
	}
}

// TestPlanMemoryOneTreePerGroup: the memories of every sample of one prompt are
// branches of one tree over that prompt, in row order, however many there are.
func TestPlanMemoryOneTreePerGroup(t *testing.T) {
	tg := target{ids: []int64{9}, from: 0}
	var trajs [][]format.Rollout
	for s := range 40 {
		trajs = append(trajs, []format.Rollout{{UID: "q", Sample: int32(s), PromptIDs: []int32{1},
			ResponseIDs: make([]int32, 20), MemStart: 0, MemEnd: 20}})
	}
	p, err := planMemory("shard", trajs, map[string]target{"q": tg}, 1000, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.mem) != 1 || len(p.mem[0].Branches) != 40 || !slices.Equal(p.mem[0].Trunk, []int64{1}) {
		t.Fatalf("P_mem: %d trees, want one over the prompt holding the 40 memories", len(p.mem))
	}
	for b, row := range p.memRow[0] {
		if row != b {
			t.Fatalf("P_mem branch %d scores row %d, want row %d", b, row, b)
		}
	}
}

// TestMemoryPassMatchesSeparate compares the stage's P_full (one stitched forward per
// trajectory) and P_mem (one forward per shared prompt) with separate forwards per
// turn. Tolerance 1e-5 absolute on probabilities: masked keys add exact zeros, only the
// GEMM shapes differ between the two.
//
// With a twin, the generator's last sample repeats the first's trajectory word for
// word, so the passes score those turns once (repeats) and copy them: every row still
// gets its own turn's values, and the twin's equal its original's.
func TestMemoryPassMatchesSeparate(t *testing.T) {
	t.Run("distinct", func(t *testing.T) { memoryMatchesSeparate(t, fixtureOf(t, 3, 4, false)) })
	t.Run("twin", func(t *testing.T) {
		f := fixtureOf(t, 3, 4, true)
		for _, shard := range f.rolls {
			first, twin := shard[:4], shard[8:]
			for i := range first {
				if !slices.Equal(first[i].ResponseIDs, twin[i].ResponseIDs) || first[i].MemEnd != twin[i].MemEnd {
					t.Fatalf("%s turn %d: the twin sample wrote %v (memory to %d), the first %v (to %d)", first[i].UID, i,
						twin[i].ResponseIDs, twin[i].MemEnd, first[i].ResponseIDs, first[i].MemEnd)
				}
			}
		}
		got := memoryMatchesSeparate(t, f)
		for i := range got {
			if got[i].Sample != 2 {
				continue
			}
			orig := got[i-8] // sample 0's row of the same turn (shards hold 3 samples × 4 turns)
			same := func(a, b *float32) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }
			if orig.Sample != 0 || orig.Turn != got[i].Turn || !slices.Equal(got[i].OldLogprobs, orig.OldLogprobs) ||
				!same(got[i].PMem, orig.PMem) || !same(got[i].PFull, orig.PFull) {
				t.Errorf("%s: the twin's scores differ from its original's (%s)", key(got[i]), key(orig))
			}
		}
	})
}

// memoryMatchesSeparate runs the stage on f and checks its P_mem and P_full against
// separate forwards; it returns the rows the stage wrote.
func memoryMatchesSeparate(t *testing.T, f *fixture) []format.Logprob {
	_, got := f.run(t, testConfig(), "logprobs", jobs.Spec{})
	m := loadModel(t, f.in.Policy)
	rows := slices.Concat(f.rolls...)
	pMem, pFull := separateMemory(t, m, rows, testTargets(t, f.tok))
	memories := 0
	for i, r := range rows {
		for _, c := range []struct {
			name      string
			got, want *float32
		}{{"p_mem", got[i].PMem, pMem[i]}, {"p_full", got[i].PFull, pFull[i]}} {
			if (c.got != nil) != hasMemory(&r) || (c.want == nil) != (c.got == nil) {
				t.Fatalf("%s %s = %v (separate %v), want set iff the turn has a memory (span [%d, %d))", key(got[i]), c.name, c.got, c.want, r.MemStart, r.MemEnd)
			}
			if c.got == nil {
				continue
			}
			if d := math.Abs(float64(*c.got - *c.want)); d > 1e-5 {
				t.Errorf("%s %s = %g, separate forward gives %g (|Δ| %g > 1e-5)", key(got[i]), c.name, *c.got, *c.want, d)
			}
		}
		if hasMemory(&r) {
			memories++
		}
	}
	if memories < 10 {
		t.Fatalf("fixture has %d memory turns, want at least 10 to compare", memories)
	}
	return got
}

// TestMemoryHoldsAnswer trains the tiny model a few Adam steps to answer with the word
// its memory holds, then scores a trajectory that keeps the gold ("paris") in <mem>
// and one that keeps a distractor ("oslo"). If the stage built context_mem and
// context_full from anything but the turn's memory span and the trajectory's history,
// the two would score alike; trained, they differ by orders of magnitude (a factor
// 10 is asserted, so the exact training trajectory does not matter).
func TestMemoryHoldsAnswer(t *testing.T) {
	dir := t.TempDir()
	tok := newTokenizer(t)
	m := newModel(t, tok, 3, nil)
	defer m.Drop()
	enc := func(s string) []int32 { return tok.Encode(s) }
	// Short contexts, so a few steps teach the model to read the memory.
	prompt := enc(bpe.ImStart + "where?" + bpe.ImEnd)
	obs := enc("<information>tower</information>")
	resp0 := func(x string) []int32 { return enc("<mem>" + x + "</mem><search>tower</search>") }
	resp1 := func(x string) []int32 { return enc("<mem>" + x + "</mem><answer>" + x + "</answer>") }
	memLen := func(x string) int32 { return int32(len(enc("<mem>" + x + "</mem>"))) }

	var pairs []qwen2.Pair
	for _, x := range []string{"paris", "oslo"} {
		answer := qwen2.Tokens(enc("<answer>" + x))
		mem := qwen2.Tokens(append(slices.Clone(prompt), enc("<mem>"+x+"</mem>")...))
		hist := qwen2.Tokens(slices.Concat(prompt, resp0(x), obs))
		pairs = append(pairs, qwen2.Pair{Context: mem, Response: answer}, qwen2.Pair{Context: hist, Response: answer})
	}
	adam(t, m, pairs, 80, 2e-3)

	policy := filepath.Join(dir, "policy")
	digest := save(t, m, tok, policy)
	var rows []format.Rollout
	for s, x := range []string{"paris", "oslo"} {
		ctx1 := slices.Concat(prompt, enc("<mem>"+x+"</mem>"), enc("<search>tower</search>"), obs)
		rows = append(rows,
			format.Rollout{UID: "q1", Sample: int32(s), Turn: 0, PromptIDs: prompt, ResponseIDs: resp0(x), MemEnd: memLen(x),
				Observation: "<information>tower</information>", ObservationIDs: obs, PolicyDigest: digest},
			format.Rollout{UID: "q1", Sample: int32(s), Turn: 1, PromptIDs: ctx1, ResponseIDs: resp1(x), MemEnd: memLen(x),
				PolicyDigest: digest})
	}
	fx := &fixture{dir: dir, tok: tok, rolls: [][]format.Rollout{rows}}
	fx.in.Policy, fx.in.Ref = policy, policy
	fx.writeInputs(t)
	cfg := testConfig()
	cfg.PCtx = true
	_, got := fx.run(t, cfg, "logprobs", jobs.Spec{})
	holds, not := got[:2], got[2:]
	for turn := range 2 {
		t.Logf("turn %d: p_mem %.4f vs %.4f, p_full %.4f vs %.4f", turn,
			*holds[turn].PMem, *not[turn].PMem, *holds[turn].PFull, *not[turn].PFull)
		if !(*holds[turn].PMem > 10*(*not[turn].PMem)) {
			t.Errorf("turn %d: p_mem = %g with the gold in memory, %g with a distractor; want over 10× higher",
				turn, *holds[turn].PMem, *not[turn].PMem)
		}
	}
	if !(*holds[1].PFull > 10*(*not[1].PFull)) {
		t.Errorf("turn 1: p_full = %g with the gold in the history, %g with a distractor; want over 10× higher", *holds[1].PFull, *not[1].PFull)
	}
	// Turn 1's own context holds turn 0's memory.
	if !(*holds[1].PCtx > 10*(*not[1].PCtx)) {
		t.Errorf("turn 1: p_ctx = %g with the gold in the context, %g with a distractor; want over 10× higher", *holds[1].PCtx, *not[1].PCtx)
	}
	// Before turn 0 the history is the prompt alone, the same for both, and it is
	// turn 0's own context too.
	for _, r := range got[:1] {
		if *r.PFull != *not[0].PFull || math.Abs(float64(*r.PCtx-*r.PFull)) > 1e-6 {
			t.Errorf("turn 0: p_full %g and %g, p_ctx %g, want all equal: all condition on the prompt only", *r.PFull, *not[0].PFull, *r.PCtx)
		}
	}
}

// adam takes Adam steps (Kingma & Ba, arXiv 1412.6980; β 0.9/0.999, no bias
// correction, which only rescales the first steps) on the mean negative
// log-likelihood of the pairs' responses.
func adam(t *testing.T, m *qwen2.Model, pairs []qwen2.Pair, steps int, lr float64) {
	t.Helper()
	must := func(x *ts.Tensor, err error) *ts.Tensor {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	// Grad mode is per OS thread in libtorch: pin the goroutine and switch it on here.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	prev, err := ts.GradSetEnabled(true)
	if err != nil {
		t.Fatal(err)
	}
	defer ts.GradSetEnabled(prev)
	// RequiresGrad_ swaps the handle inside the model's own *ts.Tensor (leaking the
	// old handle, a few bytes), so the model's forward sees leaves that need gradients.
	weights := m.Weights()
	var m1, m2 []*ts.Tensor
	for _, w := range weights {
		if err := w.Tensor.RequiresGrad_(true); err != nil {
			t.Fatal(err)
		}
		m1 = append(m1, must(w.Tensor.ZerosLike(false)))
		m2 = append(m2, must(w.Tensor.ZerosLike(false)))
	}
	for step := range steps {
		lp, _, err := m.LogProbTensor(pairs, qwen2.ScoreConfig{})
		if err != nil {
			t.Fatal(err)
		}
		mean := must(lp.Mean(lp.DType(), true))
		loss := must(mean.Neg(true))
		if step%10 == 0 || step == steps-1 {
			t.Logf("adam step %d: loss %.4f", step, loss.Float64Values()[0])
		}
		if err := loss.Backward(); err != nil {
			t.Fatal(err)
		}
		loss.MustDrop()
		ts.NoGrad(func() {
			for i, w := range weights {
				g := must(w.Tensor.Grad(false))
				a := must(m1[i].MulScalar(ts.FloatScalar(0.9), false))
				b := must(g.MulScalar(ts.FloatScalar(0.1), false))
				nm1 := must(a.Add(b, true))
				b.MustDrop()
				g2 := must(g.Square(false))
				c := must(m2[i].MulScalar(ts.FloatScalar(0.999), false))
				d := must(g2.MulScalar(ts.FloatScalar(0.001), true))
				nm2 := must(c.Add(d, true))
				d.MustDrop()
				m1[i].Copy_(nm1)
				m2[i].Copy_(nm2)
				den := must(nm2.Sqrt(true))
				den = must(den.AddScalar(ts.FloatScalar(1e-8), true))
				upd := must(nm1.Div(den, true))
				den.MustDrop()
				upd = must(upd.MulScalar(ts.FloatScalar(lr), true))
				nw := must(w.Tensor.Sub(upd, false))
				w.Tensor.Copy_(nw)
				z := must(g.ZerosLike(false))
				g.Copy_(z)
				for _, x := range []*ts.Tensor{g, upd, nw, z} {
					x.MustDrop()
				}
			}
		})
	}
	for i, w := range weights {
		if err := w.Tensor.RequiresGrad_(false); err != nil {
			t.Fatal(err)
		}
		m1[i].MustDrop()
		m2[i].MustDrop()
	}
}

// TestContextBaseline runs the stage with P_ctx instead of P_full, at the sampler's
// temperature 0.5, on rollouts with a twin: P_ctx equals the gold answer scored alone
// at temperature 1 after the turn's prompt_ids, set on exactly the memory turns; P_full
// is null; the old log-probs, scored in the same trees as the answer copies, and P_mem
// equal the default run's.
func TestContextBaseline(t *testing.T) {
	f := fixtureOf(t, 3, 4, true)
	cfg := testConfig()
	cfg.Temperature = 0.5
	_, want := f.run(t, cfg, "full", jobs.Spec{})
	cfg.PFull, cfg.PCtx = false, true
	_, got := f.run(t, cfg, "ctx", jobs.Spec{})
	m := loadModel(t, f.in.Policy)
	targets := testTargets(t, f.tok)
	rows := slices.Concat(f.rolls...)
	memories := 0
	for i, r := range rows {
		g := got[i]
		if d := torchtest.MaxAbsDiff(g.OldLogprobs, want[i].OldLogprobs); d > 1e-5 || len(g.OldLogprobs) != len(r.ResponseIDs) {
			t.Errorf("%s: %d old log-probs differ from the run without P_ctx by %g, want %d within 1e-5", key(g), len(g.OldLogprobs), d, len(r.ResponseIDs))
		}
		if g.PFull != nil || (g.PCtx != nil) != hasMemory(&r) || (g.PMem != nil) != hasMemory(&r) {
			t.Fatalf("%s: p_full %v p_ctx %v p_mem %v, want p_full null and the others set iff the turn has a memory", key(g), g.PFull, g.PCtx, g.PMem)
		}
		if !hasMemory(&r) {
			continue
		}
		memories++
		if d := math.Abs(float64(*g.PMem - *want[i].PMem)); d > 1e-5 {
			t.Errorf("%s: p_mem %g, %g with P_full", key(g), *g.PMem, *want[i].PMem)
		}
		tg := targets[r.UID]
		alone, err := m.LogProbs([]qwen2.Pair{{Context: qwen2.Tokens(r.PromptIDs), Response: tg.ids}}, qwen2.ScoreConfig{})
		if err != nil {
			t.Fatal(err)
		}
		if p := geoMean(alone[0].LogProbs[tg.from:]); math.Abs(float64(*g.PCtx)-p) > 1e-5 {
			t.Errorf("%s: p_ctx %g, the answer alone after prompt_ids at temperature 1 gives %g", key(g), *g.PCtx, p)
		}
	}
	if memories < 10 {
		t.Fatalf("fixture has %d memory turns, want at least 10", memories)
	}
}
