package update

import (
	"math/rand/v2"
	"testing"

	"github.com/mempo/mempo/model/qwen2"
	"github.com/mempo/mempo/model/qwen2/qwen2test"
	"github.com/mempo/mempo/train"
	"github.com/mempo/mempo/train/ppo"
)

// TestAccumulationEqualsFullBatch backpropagates one mini-batch of the real tiny Qwen2
// model once as a single micro-batch and once split by a small token budget into
// several micro-batches of different widths, each normalised by the mini-batch's
// divisor. The gradients must agree to float32 rounding: relative L2 difference at most
// 1e-5 (the two paths pad rows differently, so the GEMMs reduce in another order; the
// measured difference is about 1e-7). Normalising each micro-batch by its own token
// count instead must miss that bound by far, which shows the check can fail.
func TestAccumulationEqualsFullBatch(t *testing.T) {
	for _, mode := range []train.Agg{ppo.AggTokenMean, ppo.AggSeqMeanTokenMean} {
		t.Run(string(mode), func(t *testing.T) {
			base := liveTensors()
			f := newFixture(t, randomTurns(rand.New(rand.NewPCG(1, 2)), 8))
			samples, err := LoadSamples(f.in.Rollouts, f.in.Logprobs, f.in.Advantages, true)
			if err != nil {
				t.Fatal(err)
			}
			m, err := qwen2.Load(f.in.Policy, qwen2.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := train.Trainable(m); err != nil {
				t.Fatal(err)
			}
			obj := train.DefaultObjective
			obj.Agg, obj.KLCoef, obj.EntropyCoef = mode, 0.1, 0.01
			// Perturb the advantages' reference point so the first step is not all ratio 1:
			// old log-probs shifted make the clip and KL terms active.
			for i := range samples {
				for j := range samples[i].Old {
					samples[i].Old[j] -= 0.3 * float32(j%3)
					samples[i].Ref[j] += 0.2
				}
			}
			tr := train.PPOStep{Model: m, Objective: obj}
			all := make([]int, len(samples))
			lengths := make([]int, len(samples))
			for i := range all {
				all[i] = i
				lengths[i] = len(samples[i].Response)
			}
			div, err := train.Divisor(mode, lengths)
			if err != nil {
				t.Fatal(err)
			}
			run := func(budget int, own bool) ([]float64, train.Stats, int) {
				micros := qwen2.BudgetBatches(all, func(i int) int { return samples[i].Len() }, budget)
				var st train.Stats
				for _, mi := range micros {
					batch := make([]*train.Sequence, len(mi))
					var ls []int
					for r, i := range mi {
						batch[r] = &samples[i].Sequence
						ls = append(ls, len(samples[i].Response))
					}
					d := div
					if own {
						d, _ = train.Divisor(mode, ls)
					}
					s, err := tr.Micro(batch, d)
					if err != nil {
						t.Fatal(err)
					}
					st = st.Merge(s)
				}
				g := gradValues(t, m)
				for _, w := range m.Weights() {
					gt, _ := w.Tensor.Grad(false)
					gt.Zero_()
					gt.MustDrop()
				}
				return g, st, len(micros)
			}
			want, full, n1 := run(0, false)
			got, acc, n := run(40, false)
			if n1 != 1 || n < 3 {
				t.Fatalf("micro-batches: %d whole, %d split; want 1 and at least 3", n1, n)
			}
			d := qwen2test.RelDiff(got, want)
			t.Logf("%d micro-batches: relative gradient difference %.3g", n, d)
			if d > 1e-5 {
				t.Errorf("accumulated gradient differs from the whole mini-batch's by %.3g relative, want <= 1e-5", d)
			}
			for _, c := range []struct {
				name      string
				got, want float64
			}{{"pg_loss", acc.Loss, full.Loss}, {"kl", acc.KL, full.KL}, {"entropy", acc.Entropy, full.Entropy}, {"loss", acc.Total, full.Total}} {
				if diff := c.got - c.want; diff > 1e-5 || diff < -1e-5 {
					t.Errorf("merged %s = %v, whole mini-batch %v", c.name, c.got, c.want)
				}
			}
			if full.ClipFrac == 0 {
				t.Errorf("no token clipped; the fixture should exercise the clip branch")
			}
			naive, _, _ := run(40, true)
			if d := qwen2test.RelDiff(naive, want); d < 1e-3 {
				t.Errorf("per-micro-batch normalisation differs by only %.3g; the fixture cannot tell the divisors apart", d)
			}
			m.Drop()
			if got := liveTensors(); got != base {
				t.Errorf("live tensors = %d, want %d", got, base)
			}
		})
	}
}
