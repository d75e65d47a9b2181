package train

import (
	"fmt"
	"testing"
	"time"

	"github.com/sugarme/gotch/ts"

	"github.com/mempo/mempo/model/qwen2"
	"github.com/mempo/mempo/model/torch"
)

// benchParams builds a preset's weights as trainable parameters in dtype (empty: the
// preset's); layers > 0 truncates the preset (the 0.5B-shaped preset keeps
// Qwen2.5-0.5B's widths and 151936-token vocabulary). It returns the parameters and
// their element count.
func benchParams(b *testing.B, preset string, layers int, dtype string) ([]Param, int64) {
	cfg, err := qwen2.Preset(preset, 0)
	if err != nil {
		b.Fatal(err)
	}
	if layers > 0 {
		cfg.NumLayers, cfg.MaxWindowLayers = layers, layers
	}
	m, ps := initModel(b, cfg, qwen2.Options{DType: dtype})
	b.Cleanup(m.Drop)
	var n int64
	for _, p := range ps {
		n += int64(p.T.Numel())
	}
	return ps, n
}

// attachGrads gives every parameter a gradient of standard normal values.
func attachGrads(ps []Param) {
	for _, p := range ps {
		g := torch.Must(ts.Randn(p.T.MustSize(), p.T.DType(), p.T.MustDevice()))
		torch.Of(p.T).AttachGrad(torch.Of(g))
		g.MustDrop()
	}
}

var benchShapes = []struct {
	name, preset string
	layers       int
	dtype        string
}{
	{"tiny", "tiny", 0, ""},
	{"0.5B-shape-2L", "qwen2.5-0.5b-shape", 2, ""},
	// bfloat16 weights and gradients, float32 master weights and moments.
	{"0.5B-shape-2L-bf16", "qwen2.5-0.5b-shape", 2, "bfloat16"},
}

// BenchmarkAdamWStep times one optimizer step (clip and update of given gradients) of the
// flat AdamW and of the per-tensor one it replaced, alternating step for step on the
// same parameters and gradients, so both see the same load on a shared machine; it
// reports each one's ms per step, their ratio (speedup = per-tensor / flat) and the
// flat step's parameters per second. Run with -benchtime=Nx: each iteration is one
// step of each.
func BenchmarkAdamWStep(b *testing.B) {
	for _, sh := range benchShapes {
		b.Run(sh.name, func(b *testing.B) {
			ps, n := benchParams(b, sh.preset, sh.layers, sh.dtype)
			attachGrads(ps)
			flat, err := NewAdamW(ps, DefaultAdamW)
			if err != nil {
				b.Fatal(err)
			}
			defer flat.Drop()
			old := newPerTensor(ps, DefaultAdamW)
			defer old.drop()
			// One untimed step each: the flat step adopts the gradients, and both touch
			// their freshly zeroed state for the first time.
			old.step()
			if _, err := flat.Step(); err != nil {
				b.Fatal(err)
			}
			var tOld, tFlat time.Duration
			for b.Loop() {
				t0 := time.Now()
				old.step()
				t1 := time.Now()
				if _, err := flat.Step(); err != nil {
					b.Fatal(err)
				}
				tOld, tFlat = tOld+t1.Sub(t0), tFlat+time.Since(t1)
			}
			k := float64(b.N)
			b.ReportMetric(tOld.Seconds()*1e3/k, "old_ms/step")
			b.ReportMetric(tFlat.Seconds()*1e3/k, "flat_ms/step")
			b.ReportMetric(tOld.Seconds()/tFlat.Seconds(), "speedup")
			b.ReportMetric(float64(n)*k/tFlat.Seconds(), "params/s")
		})
	}
}

// BenchmarkAdamWChunk times the flat step at the 0.5B shape for several CPU chunk
// sizes (stepChunk), to choose it.
func BenchmarkAdamWChunk(b *testing.B) {
	sh := benchShapes[1]
	ps, n := benchParams(b, sh.preset, sh.layers, sh.dtype)
	for _, chunk := range []int64{1 << 14, 1 << 16, 1 << 18, 1 << 20, 1 << 22, 1 << 62} {
		b.Run(fmt.Sprintf("chunk=%d", chunk), func(b *testing.B) {
			defer func(c int64) { stepChunk = c }(stepChunk)
			stepChunk = chunk
			attachGrads(ps) // the last Drop took the gradients back
			opt, err := NewAdamW(ps, DefaultAdamW)
			if err != nil {
				b.Fatal(err)
			}
			defer opt.Drop()
			if _, err := opt.Step(); err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				if _, err := opt.Step(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(b.Elapsed().Seconds()*1e3/float64(b.N), "ms/step")
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "params/s")
		})
	}
}
