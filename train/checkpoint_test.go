package train

import (
	"testing"

	"github.com/mempo/mempo/model/qwen2"
	"github.com/mempo/mempo/model/qwen2/qwen2test"
	"github.com/mempo/mempo/model/torch"
)

// weightGrads copies every weight's gradient to the host, weight by weight in order.
func weightGrads(t *testing.T, a *AdamW) map[string][]float64 {
	t.Helper()
	out := map[string][]float64{}
	for i, h := range a.handles {
		g := h.Grad()
		for _, v := range torch.ToHost[float32](g) {
			out[a.params[i].Name] = append(out[a.params[i].Name], float64(v))
		}
		g.Free()
	}
	return out
}

// TestGradCheckpointMatches: a micro-batch of the PPO step and a batch of the NLL step
// with activation checkpointing give the loss and metrics of the plain pass and the
// same gradient of every weight, the tied embedding's included, to float32 rounding
// (relative L2 difference <= 1e-6), and leak no tensor.
func TestGradCheckpointMatches(t *testing.T) {
	for _, tt := range []struct {
		name  string
		layer int
		step  func(f *microFixture, ck bool) float64
	}{
		{"ppo", 0, func(f *microFixture, ck bool) float64 {
			s := f.step
			s.GradCheckpoint = ck
			st, err := s.Micro(f.batch, f.div)
			if err != nil {
				t.Fatal(err)
			}
			return st.Total
		}},
		{"nll/context-weight", 2, func(f *microFixture, ck bool) float64 {
			pairs := make([]qwen2.Pair, len(f.batch))
			for i, s := range f.batch {
				pairs[i] = qwen2.Pair{Context: s.Context[:len(s.Context)-int(i)*40], Response: s.Response}
			}
			loss, _, err := NLLStep{Model: f.step.Model, Chunk: 48, ContextWeight: 0.1, GradCheckpoint: ck}.Backward(pairs)
			if err != nil {
				t.Fatal(err)
			}
			return loss
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			checkLeaks(t)
			f := newMicroFixture(t, "tiny", tt.layer, 3)
			plainLoss := tt.step(f, false)
			plain := weightGrads(t, f.adam)
			if err := f.adam.ZeroGrad(); err != nil {
				t.Fatal(err)
			}
			ckLoss := tt.step(f, true)
			got := weightGrads(t, f.adam)
			if !near(ckLoss, plainLoss, 1e-6) {
				t.Errorf("checkpointed loss = %v, want %v", ckLoss, plainLoss)
			}
			if len(got) != len(plain) {
				t.Fatalf("%d weights with gradients, want %d", len(got), len(plain))
			}
			worst := 0.0
			for name, want := range plain {
				d := qwen2test.RelDiff(got[name], want)
				if !(d <= 1e-6) {
					t.Errorf("%s: checkpointed gradient differs by %.3g relative, want <= 1e-6", name, d)
				}
				worst = max(worst, d)
			}
			t.Logf("loss %v and %v, largest relative gradient difference %.3g", plainLoss, ckLoss, worst)
		})
	}
}
