package train

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/mempo/mempo/model/torch"
	"github.com/sugarme/gotch"
)

// TestOptimizerFileRoundTrip saves an optimizer after two steps and loads the file into
// a fresh one over equal parameters: the next step must match bit for bit.
func TestOptimizerFileRoundTrip(t *testing.T) {
	checkLeaks(t)
	grads := [][]float64{{0.3, -0.1, 0.7, 0.2}, {-0.5, 0.4, 0.1, 0.9}, {0.2, 0.2, -0.3, 0.05}}
	newParam := func(v []float64) Param {
		w := tensorOf(t, v, []int64{2, 2}, gotch.Float)
		return Param{Name: "w", T: torch.Must(w.SetRequiresGrad(true, true))}
	}
	step := func(o *AdamW, p Param, g []float64) {
		setGrad(t, p.T, g)
		if _, err := o.Step(); err != nil {
			t.Fatal(err)
		}
		if err := o.ZeroGrad(); err != nil {
			t.Fatal(err)
		}
	}
	cfg := DefaultAdamW
	cfg.LR = 0.01
	pa := newParam([]float64{0.5, -1, 2, 0.25})
	defer torch.Drop(pa.T)
	a, err := NewAdamW([]Param{pa}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Drop()
	step(a, pa, grads[0])
	step(a, pa, grads[1])
	path := filepath.Join(t.TempDir(), OptimizerFile)
	if err := SaveOptimizer(path, a); err != nil {
		t.Fatal(err)
	}
	// b continues from a's weights and the saved state.
	pb := newParam(torch.Values(pa.T))
	defer torch.Drop(pb.T)
	b, err := NewAdamW([]Param{pb}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Drop()
	if err := LoadOptimizer(path, b); err != nil {
		t.Fatal(err)
	}
	if b.Steps() != 2 {
		t.Errorf("loaded optimizer at step %d, want 2", b.Steps())
	}
	step(a, pa, grads[2])
	step(b, pb, grads[2])
	if got, want := torch.Values(pb.T), torch.Values(pa.T); !equalBits(got, want) {
		t.Errorf("after a loaded step: %v, uninterrupted %v", got, want)
	}

	other := Param{Name: "v", T: tensorOf(t, []float64{1, 2, 3, 4}, []int64{2, 2}, gotch.Float)}
	defer torch.Drop(other.T)
	c, err := NewAdamW([]Param{other}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Drop()
	if err := LoadOptimizer(path, c); !errors.Is(err, ErrInput) {
		t.Errorf("LoadOptimizer into another model = %v, want ErrInput", err)
	}
}

func equalBits(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
