package train

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/mempo/mempo/model/qwen2"
	"github.com/mempo/mempo/model/torch"
	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/ts"
)

// liveTensors counts live tensors and raw handles (torch.Live).
func liveTensors() int { return torch.Live() }

// initModel builds a model of c with opt, initialised with seed 1, and lists its
// trainable parameters; the caller drops the model.
func initModel(tb testing.TB, c qwen2.Config, opt qwen2.Options) (*qwen2.Model, []Param) {
	tb.Helper()
	m, err := qwen2.New(c, opt)
	if err != nil {
		tb.Fatal(err)
	}
	err = m.Init(1)
	var ps []Param
	if err == nil {
		ps, err = Trainable(m)
	}
	if err != nil {
		m.Drop()
		tb.Fatal(err)
	}
	return m, ps
}

// randomSequence is a training sequence of random ids below vocab: context tokens,
// then response tokens, each with an old and a reference log-prob near -8 and an
// advantage ~ N(0, 1).
func randomSequence(rng *rand.Rand, context, response, vocab int) *Sequence {
	s := &Sequence{Context: randomIDs(rng, context, vocab)}
	addResponse(rng, s, response, vocab)
	return s
}

// randomIDs is n random ids below vocab.
func randomIDs(rng *rand.Rand, n, vocab int) []int64 {
	out := make([]int64, 0, n)
	for range n {
		out = append(out, rng.Int64N(int64(vocab)))
	}
	return out
}

// addResponse appends n random response tokens to s, as randomSequence draws them.
func addResponse(rng *rand.Rand, s *Sequence, n, vocab int) {
	for range n {
		s.Response = append(s.Response, rng.Int64N(int64(vocab)))
		s.Old = append(s.Old, -8+float32(rng.NormFloat64())*0.1)
		s.Ref = append(s.Ref, -8+float32(rng.NormFloat64())*0.1)
		s.Adv = append(s.Adv, float32(rng.NormFloat64()))
	}
}

// checkLeaks fails t unless the live tensor count is back at base when t ends.
func checkLeaks(t *testing.T) {
	t.Helper()
	base := liveTensors()
	t.Cleanup(func() {
		if got := liveTensors(); got != base {
			t.Errorf("live tensors = %d, want %d: %d leaked", got, base, got-base)
		}
	})
}

// tensorOf builds a tensor of the given shape and dtype from row-major data.
func tensorOf(t *testing.T, data []float64, shape []int64, dt gotch.DType) *ts.Tensor {
	t.Helper()
	x, err := ts.OfSlice(data)
	if err != nil {
		t.Fatal(err)
	}
	v, err := x.View(shape, true)
	if err != nil {
		t.Fatal(err)
	}
	if dt == gotch.Double {
		return v
	}
	y, err := v.Totype(dt, true)
	if err != nil {
		t.Fatal(err)
	}
	return y
}

// padded lays sequences out as a right-padded [len(seqs), width] batch, filling the
// padding with pad, and returns it with the 0/1 mask.
func padded(seqs [][]float64, width int, pad float64) (data, mask []float64) {
	for _, s := range seqs {
		for j := 0; j < width; j++ {
			if j < len(s) {
				data = append(data, s[j])
				mask = append(mask, 1)
			} else {
				data = append(data, pad)
				mask = append(mask, 0)
			}
		}
	}
	return data, mask
}

// round32 rounds every value to float32, so a float32 tensor and the float64 reference
// see the same inputs.
func round32(seqs [][]float64) [][]float64 {
	out := make([][]float64, len(seqs))
	for i, s := range seqs {
		for _, x := range s {
			out[i] = append(out[i], float64(float32(x)))
		}
	}
	return out
}

func near(got, want, tol float64) bool {
	return math.Abs(got-want) <= tol*math.Max(1, math.Abs(want))
}

func lengths(seqs [][]float64) []int {
	n := make([]int, len(seqs))
	for i, s := range seqs {
		n[i] = len(s)
	}
	return n
}
