package qwen2

import (
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"

	"github.com/sugarme/gotch/ts"

	"github.com/mempo/mempo/model/torch"
	"github.com/mempo/mempo/model/torch/torchtest"
)

// treeCases are pairs as an update's micro-batch holds them: groups sharing a prompt,
// turns whose context extends an earlier turn's, a context that is another's prefix,
// identical contexts, a pair repeated word for word, a lone pair, and pairs without a
// response.
func treeCases(rng *rand.Rand, vocab int) []Pair {
	var pairs []Pair
	for range 3 {
		prompt := torchtest.RandomTokens(rng, 4+rng.IntN(6), vocab)
		var prev []int64
		for range 4 {
			ctx := slices.Concat(prompt, torchtest.RandomTokens(rng, 1+rng.IntN(5), vocab))
			if prev != nil && rng.IntN(2) == 0 {
				ctx = slices.Concat(prev, torchtest.RandomTokens(rng, 1+rng.IntN(4), vocab))
			}
			pairs = append(pairs, Pair{Context: ctx, Response: torchtest.RandomTokens(rng, 1+rng.IntN(6), vocab)})
			prev = ctx
		}
		again := pairs[len(pairs)-2] // a turn two samples took word for word
		pairs = append(pairs, Pair{Context: slices.Clone(again.Context), Response: slices.Clone(again.Response)})
		pairs = append(pairs, Pair{Context: slices.Clone(prompt), Response: torchtest.RandomTokens(rng, 3, vocab)})
		pairs = append(pairs, Pair{Context: slices.Clone(prompt), Response: torchtest.RandomTokens(rng, 2, vocab)})
		pairs = append(pairs, Pair{Context: slices.Concat(prompt, []int64{1}), Response: nil})
	}
	pairs = append(pairs, Pair{Context: torchtest.RandomTokens(rng, 7, vocab), Response: torchtest.RandomTokens(rng, 4, vocab)})
	rng.Shuffle(len(pairs), func(i, j int) { pairs[i], pairs[j] = pairs[j], pairs[i] })
	return pairs
}

// sftCases are turns as SFT trains them with a context loss: one token of context and
// everything after it scored, so trunks hold scored tokens. A system prompt runs
// through all, a question through each trajectory's turns, some turns share the
// opening of their rest, one sequence is its trunk and one token, and one stands
// alone.
func sftCases(rng *rand.Rand, vocab int) []Pair {
	system := torchtest.RandomTokens(rng, 6, vocab)
	var pairs []Pair
	for range 3 {
		question := torchtest.RandomTokens(rng, 2+rng.IntN(3), vocab)
		opening := torchtest.RandomTokens(rng, 3, vocab)
		for range 3 {
			rest := torchtest.RandomTokens(rng, 2+rng.IntN(5), vocab)
			if rng.IntN(2) == 0 {
				rest = slices.Concat(opening, rest)
			}
			seq := slices.Concat(system, question, rest)
			pairs = append(pairs, Pair{Context: seq[:1], Response: seq[1:]})
		}
		seq := slices.Concat(system, question, opening[:1])
		pairs = append(pairs, Pair{Context: seq[:1], Response: seq[1:]})
	}
	seq := torchtest.RandomTokens(rng, 6, vocab)
	pairs = append(pairs, Pair{Context: seq[:2], Response: seq[2:]})
	rng.Shuffle(len(pairs), func(i, j int) { pairs[i], pairs[j] = pairs[j], pairs[i] })
	return pairs
}

// TestTreeLogProbTensorMatchesFlat checks the tree pass against LogProbTensor on the
// same pairs: the same log-probs and entropies in the same order, and after the
// backward pass of one loss the same gradient of every weight, to float rounding; on
// an update's pairs and on SFT's, whose trunks hold scored tokens. A
// branch reading the wrong trunk slots, a position off by one, or a trunk token whose
// gradient missed a branch would each fail here.
func TestTreeLogProbTensorMatchesFlat(t *testing.T) {
	t.Run("update", func(t *testing.T) { treeMatchesFlat(t, treeCases(rand.New(rand.NewPCG(3, 4)), 97), false) })
	t.Run("sft", func(t *testing.T) { treeMatchesFlat(t, sftCases(rand.New(rand.NewPCG(3, 4)), 97), true) })
}

// treeMatchesFlat is TestTreeLogProbTensorMatchesFlat on pairs; trunked says whether
// they share scored tokens (ScoreConfig.ShareScored), so that trunks hold them.
func treeMatchesFlat(t *testing.T, pairs []Pair, trunked bool) {
	runtime.LockOSThread() // libtorch's grad mode is per OS thread
	defer runtime.UnlockOSThread()
	m := newTrainableModel(t, testConfig(), Options{})
	defer torch.SetGrad(torch.SetGrad(true))
	tp, ok := packTrees(pairs, trunked)
	if !ok {
		t.Fatal("no shared trunk in the cases")
	}
	if trunked && (!tp.trunked || tp.expand == nil) {
		t.Fatalf("scored tokens in trunks: %v, shared scores: %v; the cases should have both", tp.trunked, tp.expand != nil)
	}
	cfg := ScoreConfig{Entropy: true, Chunk: 7, Temperature: 0.7, ShareScored: trunked}
	flat, tree := scoreGrads(t, m, m.LogProbTensor, pairs, cfg), scoreGrads(t, m, m.TreeLogProbTensor, pairs, cfg)
	tree.check(t, flat, 1e-5)
}

// scored is what scoreGrads collects: log-probs, entropies and every weight's gradient.
type scored struct {
	lp, ent []float32
	grads   map[string][]float32
}

// scoreGrads scores pairs with score (m.LogProbTensor or m.TreeLogProbTensor) under
// cfg, backpropagates a loss weighting every token differently (so a gradient routed
// to the wrong token changes it) plus the entropies, and collects and clears every
// weight's gradient. The caller holds grad mode on.
func scoreGrads(t *testing.T, m *Model, score func([]Pair, ScoreConfig) (*ts.Tensor, *ts.Tensor, error), pairs []Pair, cfg ScoreConfig) scored {
	t.Helper()
	lp, ent, err := score(pairs, cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := scored{lp: floats(lp), ent: floats(ent), grads: map[string][]float32{}}
	w := make([]float32, len(r.lp))
	for i := range w {
		w[i] = float32(i%5) - 1.5
	}
	wt := torch.RawFromHost(w, []int64{int64(len(w))}, m.Device())
	a := torch.Of(lp).Mul(wt)
	sum := a.SumLast()
	e := torch.Of(ent).SumLast()
	sum.Add_(e)
	loss := sum.Wrap()
	torch.Free(wt, a, e)
	torch.Drop(lp, ent)
	defer loss.MustDrop()
	if err := loss.Backward(); err != nil {
		t.Fatalf("backward: %v", err)
	}
	for _, w := range m.Weights() {
		g := torch.Must(w.Tensor.Grad(false))
		r.grads[w.Key] = floats(g)
		g.MustDrop()
		torch.Of(w.Tensor).ClearGrad()
	}
	return r
}

// check compares s with want: log-probs and entropies within tol absolute, gradients
// within tol of each weight's largest gradient (at least 1): a shared token's gradient
// sums every pair's in another order (the embedding's reach 80 in the SFT cases).
func (s scored) check(t *testing.T, want scored, tol float64) {
	t.Helper()
	if len(s.lp) != len(want.lp) || len(s.ent) != len(want.ent) {
		t.Fatalf("scored %d/%d tokens, want %d/%d", len(s.lp), len(s.ent), len(want.lp), len(want.ent))
	}
	if d := torchtest.MaxAbsDiff(s.lp, want.lp); d > tol {
		t.Errorf("log-probs differ by %g", d)
	}
	if d := torchtest.MaxAbsDiff(s.ent, want.ent); d > tol {
		t.Errorf("entropies differ by %g", d)
	}
	for k, g := range want.grads {
		scale := max(1, torchtest.MaxAbsDiff(g, make([]float32, len(g))))
		if d := torchtest.MaxAbsDiff(s.grads[k], g); d > tol*scale {
			t.Errorf("%s: gradients differ by %g, %g relative", k, d, d/scale)
		}
	}
}

// TestTreeSlots checks that the tree pass computes fewer slots than the flat pass on
// pairs sharing a prompt, and as many as PackShape when nothing is shared.
func TestTreeSlots(t *testing.T) {
	prompt := make([]int64, 40)
	var shared, lone []Pair
	var lengths []int
	for i := range 8 {
		ctx := slices.Concat(prompt, []int64{int64(i + 1), 5, 6})
		shared = append(shared, Pair{Context: ctx, Response: []int64{7, 8, 9}})
		lone = append(lone, Pair{Context: []int64{int64(i + 1), 5, 6}, Response: []int64{7, 8, 9}})
		lengths = append(lengths, len(ctx)+3)
	}
	rows, width := PackShape(lengths)
	if got := TreeSlots(shared); got != 40+8*6 {
		t.Errorf("shared prompt: %d slots, want %d (the prompt once, then each branch)", got, 40+8*6)
	}
	if got := TreeSlots(shared); got >= rows*width {
		t.Errorf("shared prompt: %d slots, not fewer than the flat pass's %d", got, rows*width)
	}
	if got := TreeSlots(append(shared, shared[3])); got != 40+8*6 {
		t.Errorf("a repeated pair: %d slots, want %d (computed once)", got, 40+8*6)
	}
	if got := TreeSlots(lone); got != 8*6 {
		t.Errorf("nothing shared: %d slots, want %d", got, 8*6)
	}
}

// TestTreeLogProbTensorBFloat16: the tree pass runs in bfloat16 with gradients, and
// its log-probs stay within bfloat16 rounding of the unshared pass's.
func TestTreeLogProbTensorBFloat16(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	m := newTrainableModel(t, testConfig(), Options{DType: "bfloat16"})
	defer torch.SetGrad(torch.SetGrad(true))
	pairs := treeCases(rand.New(rand.NewPCG(5, 6)), 97)
	cfg := ScoreConfig{Entropy: true}
	flat, fent, err := m.LogProbTensor(pairs, cfg)
	if err != nil {
		t.Fatal(err)
	}
	tree, tent, err := m.TreeLogProbTensor(pairs, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if d := torchtest.MaxAbsDiff(floats(tree), floats(flat)); d > 0.05 {
		t.Errorf("bfloat16 log-probs differ by %g, want <= 0.05", d)
	}
	s := torch.Of(tree).SumLast()
	loss := s.Wrap()
	defer loss.MustDrop()
	if err := loss.Backward(); err != nil {
		t.Fatalf("backward: %v", err)
	}
	g := torch.Must(m.Layers[0].Attn.K.Weight.Grad(false))
	defer g.MustDrop()
	if n := torch.Values(g); len(n) == 0 || n[0] != n[0] {
		t.Errorf("layer 0's key weight has no finite gradient")
	}
	torch.Drop(flat, fent, tree, tent)
}

// TestTreeBatches: budget 0 keeps every item in one batch; a budget
// below any pair's slots puts each alone; every batch of two or more stays within the
// budget, and every item lands in exactly one batch.
func TestTreeBatches(t *testing.T) {
	pairs := treeCases(rand.New(rand.NewPCG(9, 9)), 97)
	idx := make([]int, len(pairs))
	for i := range idx {
		idx[i] = i
	}
	pair := func(i int) Pair { return pairs[i] }
	byContext := func(a, b int) int { return slices.Compare(pairs[a].Context, pairs[b].Context) }
	if got := TreeBatches(idx, pair, 0); len(got) != 1 || !slices.Equal(got[0], idx) {
		t.Errorf("budget 0: %v, want one batch of all", got)
	}
	if got := TreeBatches(idx, pair, 1); len(got) != len(idx) {
		t.Errorf("budget 1: %d batches, want %d of one", len(got), len(idx))
	}
	for _, budget := range []int{20, 60, 150} {
		var seen []int
		for _, b := range TreeBatches(idx, pair, budget) {
			ps := make([]Pair, len(b))
			for k, i := range b {
				ps[k] = pairs[i]
			}
			if n := TreeSlots(ps); len(b) > 1 && n > budget {
				t.Errorf("budget %d: batch %v has %d slots", budget, b, n)
			}
			seen = append(seen, b...)
		}
		if !slices.IsSortedFunc(seen, byContext) {
			t.Errorf("budget %d: batches not in context order", budget)
		}
		slices.Sort(seen)
		if !slices.Equal(seen, idx) {
			t.Errorf("budget %d: batches hold %v", budget, seen)
		}
	}
}
