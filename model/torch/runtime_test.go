package torch

import (
	"fmt"
	"math"
	"os"
	"strings"
	"testing"

	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/ts"
)

// TestVersion: the binary runs on the libtorch build/go.sh built it against (it exports
// LIBTORCH_BUILD_VERSION), not on another one found at run time.
func TestVersion(t *testing.T) {
	got := Version()
	if !strings.HasPrefix(got, "2.") {
		t.Fatalf("Version() = %q, want a libtorch 2.x", got)
	}
	if want := os.Getenv("LIBTORCH_BUILD_VERSION"); want != "" && got != want {
		t.Fatalf("Version() = %q, but build/go.sh built against %q", got, want)
	}
}

func TestDevice(t *testing.T) {
	if d, err := Device("cpu"); err != nil || d != gotch.CPU {
		t.Errorf("Device(cpu) = %v, %v; want CPU", d, err)
	}
	for _, bad := range []string{"", "gpu", "cuda:x", "cuda:-1", "cuda:", "cuda0"} {
		if _, err := Device(bad); err == nil || !strings.Contains(err.Error(), "want cpu, cuda or cuda:N") {
			t.Errorf("Device(%q) = %v, want a spelling error", bad, err)
		}
	}
}

// TestDeviceCUDA: --device cuda names what is missing, on whichever libtorch the test
// binary links. On the CPU build (make test) that is the CUDA build itself.
func TestDeviceCUDA(t *testing.T) {
	if !CUDABuilt() {
		_, err := Device("cuda")
		if want := "this binary is linked against a CPU-only libtorch"; err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("Device(cuda) on the CPU build = %v, want an error mentioning %q", err, want)
		}
		if !strings.Contains(err.Error(), "make build CUDA=1") {
			t.Errorf("Device(cuda) = %v, want it to say how to build for CUDA", err)
		}
		return
	}
	n := int(gotch.CUDA.DeviceCount())
	if _, err := Device("cuda"); (err == nil) != (n > 0) {
		t.Errorf("Device(cuda) with %d devices visible = %v", n, err)
	}
	if _, err := Device(fmt.Sprintf("cuda:%d", n)); err == nil {
		t.Errorf("Device(cuda:%d) with %d devices visible = nil error", n, n)
	}
}

// TestUseLocalCUDA: after UseLocalCUDA(i), "cuda" names cuda:i and cuda:N stays N.
func TestUseLocalCUDA(t *testing.T) {
	defer UseLocalCUDA(0)
	UseLocalCUDA(3)
	if idx, cuda, err := parseDevice("cuda"); idx != 3 || !cuda || err != nil {
		t.Errorf("parseDevice(cuda) after UseLocalCUDA(3) = %d, %v, %v; want 3", idx, cuda, err)
	}
	if idx, _, _ := parseDevice("cuda:1"); idx != 1 {
		t.Errorf("parseDevice(cuda:1) after UseLocalCUDA(3) = %d, want 1", idx)
	}
}

func TestCUDAUsable(t *testing.T) {
	tests := []struct {
		name  string
		idx   int
		built bool
		count int
		want  string // "" for usable
	}{
		{"cpu build", 0, false, 0, `device "cuda": this binary is linked against a CPU-only libtorch`},
		{"cpu build ignores count", 0, false, 2, "CPU-only libtorch"},
		{"no device", 0, true, 0, `device "cuda": no CUDA device is visible (CUDA build linked, device count 0; check CUDA_VISIBLE_DEVICES and the driver)`},
		{"first", 0, true, 1, ""},
		{"last", 1, true, 2, ""},
		{"past the last", 2, true, 2, `device "cuda:2": only 2 CUDA device(s) visible, cuda:0 to cuda:1`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			name := "cuda"
			if tt.idx > 0 {
				name = fmt.Sprintf("cuda:%d", tt.idx)
			}
			err := cudaUsable(name, tt.idx, tt.built, tt.count)
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("cudaUsable(%q, built %v, count %d) = %v, want nil", name, tt.built, tt.count, err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("cudaUsable(%q, built %v, count %d) = %v, want an error mentioning %q", name, tt.built, tt.count, err, tt.want)
			}
		})
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

// TestBoundHeap walks BoundHeap's cache through reuse, a miss, eviction and trims,
// checking its live and idle bytes after every step. Sizes are in MiB.
func TestBoundHeap(t *testing.T) {
	BoundHeap()
	TrimHeap()
	base, _ := HeapStats()
	held := map[string]Raw{}
	defer func() {
		for _, r := range held {
			r.Free()
		}
	}()
	steps := []struct {
		do         string // "alloc", "free" or "trim"
		name       string
		mib        float64
		live, idle float64 // after the step
	}{
		{"alloc", "small", 0.5, 0, 0}, // below 1 MiB: malloc's
		{"alloc", "a", 4, 4, 0},
		{"free", "a", 0, 0, 4},
		{"alloc", "b", 3, 4, 0}, // a's block: b is at least half its size
		{"free", "b", 0, 0, 4},
		{"alloc", "c", 1, 1, 4}, // a miss: 4 MiB is over twice 1 MiB
		{"free", "c", 0, 0, 5},
		{"alloc", "d", 6, 6, 5},
		{"free", "d", 0, 0, 11},
		{"alloc", "e", 7, 7, 7}, // 11 idle + 7 exceeds twice the peak of 7: a's block goes
		{"trim", "", 0, 7, 0},
		{"free", "e", 0, 0, 7},
		{"free", "small", 0, 0, 7},
		{"trim", "", 0, 0, 0},
	}
	const mib = 1 << 20
	for i, s := range steps {
		switch s.do {
		case "alloc":
			held[s.name] = RawEmpty([]int64{int64(s.mib * mib / 4)}, gotch.Float, gotch.CPU)
		case "free":
			held[s.name].Free()
			delete(held, s.name)
		case "trim":
			TrimHeap()
		}
		live, idle := HeapStats()
		if got, want := [2]float64{float64(live-base) / mib, float64(idle) / mib}, [2]float64{s.live, s.idle}; got != want {
			t.Fatalf("step %d (%s %s %g): HeapStats() = live %g, idle %g MiB; want %g, %g", i, s.do, s.name, s.mib, got[0], got[1], want[0], want[1])
		}
	}
}

// TestBoundHeapValues checks that a tensor in a reused block holds what was written.
func TestBoundHeapValues(t *testing.T) {
	BoundHeap()
	want := make([]float32, 1<<19) // 2 MiB
	for i := range want {
		want[i] = float32(i)
	}
	for range 2 { // the second copy reuses the first's block
		r := RawFromHost(want, []int64{int64(len(want))}, gotch.CPU)
		got := ToHost[float32](r)
		r.Free()
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("ToHost(RawFromHost(v))[%d] = %v, want %v", i, got[i], want[i])
			}
		}
	}
}
