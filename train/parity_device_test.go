package train

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/mempo/mempo/model/qwen2"
	"github.com/mempo/mempo/model/torch"
	"github.com/mempo/mempo/model/torch/torchtest"
)

// TestDeviceParityUpdate runs one PPO update step (DefaultObjective's forward and
// backward over 4 turns, then one AdamW step) on the same randomly initialised
// model on the CPU and on the device MEMPO_TEST_DEVICE names, in float32 and in
// bfloat16 on both sides, and compares the loss, the gradient norm and every
// parameter after the step (for a bfloat16 parameter its float32 master copy, which
// holds the update; the bfloat16 weight rounds most of it away). build/gpu_check runs
// it on a GPU; MEMPO_TEST_DEVICE=cpu compares the CPU with itself; unset, it skips.
//
// The first AdamW step moves each weight by about lr·sign(g) (m̂/√v̂ = g/|g|), so the
// step is compared in units of lr: a weight whose gradient is within rounding of 0
// may move the other way on the other device, 2·lr apart, so the test bounds the
// share of such weights (the mean difference in units of lr), not the largest one,
// which it logs. The LR is 1e-3, not DefaultAdamW's 1e-6, so that the step is far
// above float32 rounding of the weights. Tolerances are first estimates, to be
// revised from what a GPU run logs.
func TestDeviceParityUpdate(t *testing.T) {
	dev := torchtest.ParityDevice(t)
	type shape struct {
		name, preset string
		layers       int
	}
	shapes := []shape{{"tiny", "tiny", 0}}
	if !testing.Short() {
		shapes = append(shapes, shape{"0.5b-shape-2l", "qwen2.5-0.5b-shape", 2})
	}
	// Loss and gradient norm relative to their CPU values; the step in units of lr.
	tols := map[string]struct{ loss, norm, step torchtest.Tolerance }{
		"float32":  {loss: torchtest.Tolerance{Max: 1e-4, Mean: 1e-4}, norm: torchtest.Tolerance{Max: 1e-4, Mean: 1e-4}, step: torchtest.Tolerance{Max: 2.01, Mean: 2e-3}},
		"bfloat16": {loss: torchtest.Tolerance{Max: 2e-2, Mean: 2e-2}, norm: torchtest.Tolerance{Max: 5e-2, Mean: 5e-2}, step: torchtest.Tolerance{Max: 2.01, Mean: 0.1}},
	}
	for _, sh := range shapes {
		for _, dtype := range []string{"float32", "bfloat16"} {
			t.Run(sh.name+"/"+dtype, func(t *testing.T) {
				c, err := qwen2.Preset(sh.preset, 0)
				if err != nil {
					t.Fatal(err)
				}
				if sh.layers > 0 {
					c.NumLayers, c.MaxWindowLayers = sh.layers, sh.layers
				}
				tol := tols[dtype]
				const lr = 1e-3
				want := paritySteps(t, c, "cpu", dtype, lr)
				got := paritySteps(t, c, dev, dtype, lr)
				rel := func(g, w float64) torchtest.Diff {
					return torchtest.Diff64([]float64{g / math.Max(math.Abs(w), 1e-12)}, []float64{w / math.Max(math.Abs(w), 1e-12)})
				}
				torchtest.CheckDiff(t, "loss (relative)", rel(got.loss, want.loss), 1, tol.loss)
				torchtest.CheckDiff(t, "gradient norm (relative)", rel(got.norm, want.norm), 1, tol.norm)
				var d torchtest.Diff
				for name, wv := range want.values {
					gv, ok := got.values[name]
					if !ok || len(gv) != len(wv) {
						t.Fatalf("parameter %s: %d values on %s, want %d", name, len(gv), dev, len(wv))
					}
					d = d.Merge(torchtest.Diff32(gv, wv))
				}
				torchtest.CheckDiff(t, "parameters after one AdamW step (scale: lr)", d, lr, tol.step)
			})
		}
	}
}

// stepResult is what one update step computed on one device.
type stepResult struct {
	loss, norm float64
	values     map[string][]float32 // per parameter (or its master): after the step
}

// paritySteps builds the model (seed 1) on dev in dtype, runs one update step with
// AdamW at lr, and copies the results to the host.
func paritySteps(t *testing.T, c qwen2.Config, dev, dtype string, lr float64) stepResult {
	m, ps := initModel(t, c, qwen2.Options{Device: dev, DType: dtype})
	defer m.Drop()
	cfg := DefaultAdamW
	cfg.LR = lr
	adam, err := NewAdamW(ps, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer adam.Drop()

	rng := rand.New(rand.NewPCG(14, 14))
	var batch []*Sequence
	var lengths []int
	for range 4 {
		s := &Sequence{Context: randomIDs(rng, 24+rng.IntN(9), c.VocabSize)}
		addResponse(rng, s, 12+rng.IntN(9), c.VocabSize)
		batch, lengths = append(batch, s), append(lengths, len(s.Response))
	}
	div, err := Divisor(DefaultObjective.Agg, lengths)
	if err != nil {
		t.Fatal(err)
	}
	st, err := PPOStep{Model: m, Objective: DefaultObjective}.Micro(batch, div)
	if err != nil {
		t.Fatal(err)
	}
	ss, err := adam.Step()
	if err != nil {
		t.Fatal(err)
	}
	state, err := adam.State()
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, x := range state {
			x.MustDrop()
		}
	}()
	out := stepResult{loss: st.Total, norm: ss.GradNorm, values: map[string][]float32{}}
	for _, p := range ps {
		if master, ok := state[p.Name+keyMaster]; ok {
			out.values[p.Name] = torch.ToHost[float32](torch.Of(master))
			continue
		}
		out.values[p.Name] = torch.ToHost[float32](torch.Of(p.T))
	}
	for name := range state {
		if strings.HasSuffix(name, keyMaster) {
			if _, ok := out.values[strings.TrimSuffix(name, keyMaster)]; !ok {
				t.Fatalf("optimizer master %s names no parameter", name)
			}
		}
	}
	return out
}
