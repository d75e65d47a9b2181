package torch

import (
	"math"
	"testing"

	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/ts"
)

func TestVersion(t *testing.T) {
	if got := Version(); got != WantVersion {
		t.Fatalf("Version() = %q, want %q", got, WantVersion)
	}
}

func TestSetNumThreads(t *testing.T) {
	old := NumThreads()
	if old < 1 {
		t.Fatalf("NumThreads() = %d, want >= 1", old)
	}
	defer SetNumThreads(old)
	for _, n := range []int{1, 2} {
		if err := SetNumThreads(n); err != nil {
			t.Fatal(err)
		}
		if got := NumThreads(); got != n {
			t.Errorf("after SetNumThreads(%d): NumThreads() = %d", n, got)
		}
	}
	if err := SetNumThreads(0); err == nil {
		t.Error("SetNumThreads(0) = nil, want error")
	}
}

func TestDevice(t *testing.T) {
	if d, err := Device("cpu"); err != nil || d != gotch.CPU {
		t.Errorf("Device(cpu) = %v, %v; want CPU", d, err)
	}
	for _, bad := range []string{"", "gpu", "cuda:x", "cuda:-1"} {
		if _, err := Device(bad); err == nil {
			t.Errorf("Device(%q) = nil error, want error", bad)
		}
	}
}

// TestMatmulBackward checks a real libtorch computation end to end:
// y = sum(A·x) with A = [[1,2],[3,4]], x = [5,6] gives y = 17 + 39 = 56,
// dy/dx = column sums of A = [4, 6] and dy/dA = [[5,6],[5,6]].
func TestMatmulBackward(t *testing.T) {
	a := ts.MustOfSlice([]float32{1, 2, 3, 4}).MustView([]int64{2, 2}, true).MustSetRequiresGrad(true, true)
	x := ts.MustOfSlice([]float32{5, 6}).MustSetRequiresGrad(true, true)
	defer a.MustDrop()
	defer x.MustDrop()

	ax := a.MustMv(x, false)
	y := ax.MustSum(gotch.Float, true)
	defer y.MustDrop()
	if got := y.Float64Values()[0]; got != 56 {
		t.Fatalf("sum(A·x) = %v, want 56", got)
	}
	y.MustBackward()

	ga := a.MustGrad(false)
	gx := x.MustGrad(false)
	defer ga.MustDrop()
	defer gx.MustDrop()
	check := func(name string, got []float64, want []float64) {
		t.Helper()
		for i := range want {
			if math.Abs(got[i]-want[i]) > 1e-6 {
				t.Fatalf("%s = %v, want %v", name, got, want)
			}
		}
	}
	check("dy/dx", gx.Float64Values(), []float64{4, 6})
	check("dy/dA", ga.Float64Values(), []float64{5, 6, 5, 6})
}
