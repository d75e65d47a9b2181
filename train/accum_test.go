package train

import (
	"math/rand/v2"
	"testing"

	"github.com/mempo/mempo/model/qwen2/qwen2test"
	"github.com/mempo/mempo/model/torch"
	"github.com/mempo/mempo/train/ppo"
	"github.com/sugarme/gotch"
)

// TestAccumulationEqualsFullBatch backpropagates a mini-batch of six sequences once
// whole and once as three micro-batches of different sizes and widths, each normalised
// by the mini-batch's divisor. The accumulated gradient must equal the full one to
// float32 rounding: a relative L2 difference of at most 1e-6 (float32's ε is 1.2e-7;
// the two sum the same terms in a different order). Normalising each micro-batch by
// its own count instead must fail that bound, which shows the check can fail.
func TestAccumulationEqualsFullBatch(t *testing.T) {
	checkLeaks(t)
	lens := []int{7, 3, 5, 1, 6, 4}
	splits := [][2]int{{0, 2}, {2, 3}, {3, 6}}
	for _, mode := range []Agg{ppo.AggTokenMean, ppo.AggSeqMeanTokenMean, ppo.AggSeqMeanTokenSum} {
		t.Run(string(mode), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(7, 11))
			e := newEpisode(lens, 4, 6, rng)
			l := newLinear(t, 6, 4, gotch.Float, rng)
			defer l.w.MustDrop()
			obj := Objective{Clip: ppo.DefaultClip, KL: ppo.KLK3, KLCoef: 0.1, EntropyCoef: 0.01, Agg: mode}
			div, err := Divisor(mode, lens)
			if err != nil {
				t.Fatal(err)
			}

			step := func(lo, hi int, div float64) Stats {
				mb, done := e.micro(t, l, lo, hi, gotch.Float)
				defer done()
				loss, st, err := obj.Loss(mb, div)
				if err != nil {
					t.Fatal(err)
				}
				defer loss.MustDrop()
				torch.Check(loss.Backward())
				return st
			}

			full := step(0, len(lens), div)
			want := l.grad()
			l.zeroGrad()

			var acc Stats
			for _, s := range splits {
				acc = acc.Merge(step(s[0], s[1], div))
			}
			got := l.grad()
			l.zeroGrad()
			d := qwen2test.RelDiff(got, want)
			t.Logf("relative gradient difference %.3g", d)
			if d > 1e-6 {
				t.Errorf("accumulated gradient differs from the full mini-batch's by %.3g relative, want <= 1e-6", d)
			}
			for _, c := range []struct {
				name      string
				got, want float64
			}{
				{"pg_loss", acc.Loss, full.Loss}, {"pg_clipfrac", acc.ClipFrac, full.ClipFrac},
				{"ppo_kl", acc.PPOKL, full.PPOKL}, {"kl", acc.KL, full.KL},
				{"entropy", acc.Entropy, full.Entropy}, {"loss", acc.Total, full.Total},
			} {
				if !near(c.got, c.want, 1e-6) {
					t.Errorf("merged %s = %v, full mini-batch %v", c.name, c.got, c.want)
				}
			}
			if acc.Tokens != 26 {
				t.Errorf("merged tokens = %d, want 26", acc.Tokens)
			}
			if full.ClipFrac == 0 {
				t.Errorf("fixture clips no token; want some clipped so the clip path is accumulated too")
			}

			for _, s := range splits {
				own, err := Divisor(mode, lens[s[0]:s[1]])
				if err != nil {
					t.Fatal(err)
				}
				step(s[0], s[1], own)
			}
			naive := l.grad()
			if d := qwen2test.RelDiff(naive, want); d < 1e-3 {
				t.Errorf("per-micro-batch normalisation differs by only %.3g; the fixture cannot tell the divisors apart", d)
			}
		})
	}
}
