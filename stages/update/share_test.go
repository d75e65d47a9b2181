package update

import (
	"cmp"
	"context"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"

	"github.com/mempo/mempo/jobs"
	"github.com/mempo/mempo/model/qwen2"
	"github.com/mempo/mempo/model/qwen2/qwen2test"
	"github.com/mempo/mempo/train"
)

// groupTurns draws GRPO groups as the rollout stage writes them: per prompt, samples
// whose turn contexts start with the prompt, a later turn's context often repeating
// the earlier one's.
func groupTurns(rng *rand.Rand, groups, samples int) []turn {
	var out []turn
	for g := range groups {
		prompt := make([]int32, 6+rng.IntN(6))
		for i := range prompt {
			prompt[i] = int32(rng.IntN(fixtureVocab))
		}
		for s := range samples {
			ctx := slices.Clone(prompt)
			for tn := range 1 + rng.IntN(3) {
				tr := turn{uid: string(rune('a'+g)) + "q", sample: int32(s), turn: int32(tn)}
				for range 1 + rng.IntN(5) {
					ctx = append(ctx, int32(rng.IntN(fixtureVocab)))
				}
				tr.ctx = slices.Clone(ctx)
				for range 1 + rng.IntN(6) {
					tr.resp = append(tr.resp, int32(rng.IntN(fixtureVocab)))
					tr.adv = append(tr.adv, float32(rng.NormFloat64()))
				}
				out = append(out, tr)
				ctx = append(ctx, tr.resp...)
			}
		}
	}
	return out
}

// withTwins replaces each group's last sample with its first sample's turns word for
// word, as a confident policy's samples repeat each other, advantages included (the
// same trajectory earns the same rewards): a tree pass computes such a pair once, and
// its gradient must count both copies.
func withTwins(turns []turn) []turn {
	last := map[string]int32{}
	for _, tr := range turns {
		last[tr.uid] = max(last[tr.uid], tr.sample)
	}
	var out []turn
	for _, tr := range turns {
		if tr.sample != last[tr.uid] {
			out = append(out, tr)
		}
	}
	for _, tr := range turns {
		if tr.sample == 0 && last[tr.uid] > 0 {
			twin := tr
			twin.sample = last[tr.uid]
			out = append(out, twin)
		}
	}
	slices.SortStableFunc(out, func(a, b turn) int {
		return cmp.Or(cmp.Compare(a.uid, b.uid), cmp.Compare(a.sample, b.sample), cmp.Compare(a.turn, b.turn))
	})
	return out
}

// TestSharePrefixes: an update whose micro-batches run as tree passes over the
// samples' shared prefixes writes the weights the unshared update writes, to float32
// rounding, under another cache key, with one pass per mini-batch and with several,
// and with samples that repeat another word for word (twin).
func TestSharePrefixes(t *testing.T) {
	t.Run("distinct", func(t *testing.T) {
		sharePrefixesMatch(t, groupTurns(rand.New(rand.NewPCG(5, 6)), 3, 4))
	})
	t.Run("twin", func(t *testing.T) {
		sharePrefixesMatch(t, withTwins(groupTurns(rand.New(rand.NewPCG(5, 6)), 3, 4)))
	})
}

func sharePrefixesMatch(t *testing.T, turns []turn) {
	f := newFixture(t, turns)
	for _, budget := range []int{0, 96} {
		cfg := testConfig()
		cfg.MicroTokenBudget = budget
		cfg.Objective.KLCoef, cfg.Objective.EntropyCoef = 0.05, 0.01
		cfg.SharePrefixes = false
		plain, err := Run(context.Background(), cfg, f.in, jobs.Spec{Out: filepath.Join(f.dir, "plain", string(rune('0'+budget%10))), Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		cfg.SharePrefixes = true
		shared, err := Run(context.Background(), cfg, f.in, jobs.Spec{Out: filepath.Join(f.dir, "shared", string(rune('0'+budget%10))), Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		if shared.Key == plain.Key {
			t.Errorf("budget %d: --share-prefixes did not change the cache key %s", budget, shared.Key.Short())
		}
		if d := qwen2test.ChangeDiff(t, f.in.Policy, shared.Dir, plain.Dir); !(d <= 1e-5) {
			t.Errorf("budget %d: weights' change with shared prefixes differs by %.3g relative, want <= 1e-5", budget, d)
		} else {
			t.Logf("budget %d: weights' change differs by %.3g relative", budget, d)
		}
	}
}

// TestTreeMicroBatches: with shared prefixes the mini-batch is cut in context order
// into micro-batches within the budget of tree slots, and they share: fewer slots
// than the same samples cost unshared.
func TestTreeMicroBatches(t *testing.T) {
	turns := groupTurns(rand.New(rand.NewPCG(7, 8)), 4, 8)
	samples := make([]Sample, len(turns))
	b := Batch{}
	for i, tr := range turns {
		samples[i].Context, samples[i].Response = qwen2.Tokens(tr.ctx), qwen2.Tokens(tr.resp)
		b.Samples = append(b.Samples, i)
	}
	cfg := DefaultConfig()
	cfg.MicroTokenBudget = 200
	var got []int
	shared, flat := 0, 0
	seqs := make([]*train.Sequence, len(samples))
	for i := range samples {
		seqs[i] = &samples[i].Sequence
	}
	cut := train.PPOStep{SharePrefixes: cfg.SharePrefixes, GradCheckpoint: cfg.GradCheckpoint}.Cut(seqs, cfg.MicroTokenBudget)
	for _, mi := range cut {
		pairs := make([]qwen2.Pair, len(mi))
		var lengths []int
		for k, i := range mi {
			pairs[k] = samples[i].Pair()
			lengths = append(lengths, samples[i].Len())
		}
		slots := qwen2.TreeSlots(pairs)
		if slots > cfg.MicroTokenBudget && len(mi) > 1 {
			t.Errorf("micro-batch of %d samples: %d tree slots over the budget %d", len(mi), slots, cfg.MicroTokenBudget)
		}
		r, w := qwen2.PackShape(lengths)
		shared, flat = shared+slots, flat+r*w
		got = append(got, mi...)
	}
	if !slices.IsSortedFunc(got, func(a, b int) int { return slices.Compare(samples[a].Context, samples[b].Context) }) {
		t.Errorf("micro-batches not in context order")
	}
	slices.Sort(got)
	if !slices.Equal(got, b.Samples) {
		t.Errorf("micro-batches hold samples %v, want each of %v once", got, b.Samples)
	}
	if shared >= flat*3/4 {
		t.Errorf("tree passes compute %d slots, the same micro-batches unshared %d: want under three quarters", shared, flat)
	}
}

// TestProcs: an update whose micro-batches are dealt among two processes writes the
// weights one process writes, to float32 rounding, under another cache key, and its
// metrics agree.
func TestProcs(t *testing.T) {
	f := newFixture(t, groupTurns(rand.New(rand.NewPCG(7, 8)), 3, 4))
	cfg := testConfig()
	cfg.MicroTokenBudget = 96
	cfg.Objective.KLCoef, cfg.Objective.EntropyCoef = 0.05, 0.01
	one, err := Run(context.Background(), cfg, f.in, jobs.Spec{Out: filepath.Join(f.dir, "one"), Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Procs = 2
	two, err := Run(context.Background(), cfg, f.in, jobs.Spec{Out: filepath.Join(f.dir, "two"), Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if one.Key == two.Key {
		t.Errorf("--procs 2 did not change the cache key %s", two.Key.Short())
	}
	if d := qwen2test.ChangeDiff(t, f.in.Policy, two.Dir, one.Dir); !(d <= 1e-5) {
		t.Errorf("weights' change with two processes differs by %.3g relative, want <= 1e-5", d)
	}
	for _, k := range []string{"pg_loss", "kl", "entropy", "pg_clipfrac", "tokens"} {
		g, w := two.State.Metrics[k], one.State.Metrics[k]
		if math.Abs(g-w) > 1e-5*math.Max(1, math.Abs(w)) {
			t.Errorf("%s = %v with two processes, %v with one", k, g, w)
		}
	}
}
