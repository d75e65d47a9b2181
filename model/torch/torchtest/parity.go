package torchtest

import (
	"fmt"
	"math"
	"testing"
)

// Tolerance bounds how far a device's values may be from the CPU's in a parity test
// (*_device_test.go): the largest and the mean absolute difference, in the units the
// caller states (absolute, or a multiple of the reference's scale).
type Tolerance struct {
	Max, Mean float64
}

// Diff summarises the absolute differences of two equally long value lists.
type Diff struct {
	Max, Mean float64
	N         int
}

// Diff64 is the Diff of got against want.
func Diff64(got, want []float64) Diff {
	if len(got) != len(want) {
		panic(fmt.Sprintf("torchtest: diff of %d values against %d", len(got), len(want)))
	}
	d := Diff{N: len(got)}
	for i := range got {
		a := math.Abs(got[i] - want[i])
		if math.IsNaN(a) {
			a = math.Inf(1)
		}
		d.Max = max(d.Max, a)
		d.Mean += a
	}
	if d.N > 0 {
		d.Mean /= float64(d.N)
	}
	return d
}

// Merge is the Diff of d's values and o's together.
func (d Diff) Merge(o Diff) Diff {
	n := d.N + o.N
	if n == 0 {
		return Diff{}
	}
	return Diff{Max: max(d.Max, o.Max), Mean: (d.Mean*float64(d.N) + o.Mean*float64(o.N)) / float64(n), N: n}
}

// Diff32 is Diff64 over float32 values.
func Diff32(got, want []float32) Diff {
	g, w := make([]float64, len(got)), make([]float64, len(want))
	for i := range got {
		g[i] = float64(got[i])
	}
	for i := range want {
		w[i] = float64(want[i])
	}
	return Diff64(g, w)
}

// CheckDiff logs d against tol scaled by scale on one line that build/gpu_check
// collects into its report ("parity <test> <what>: …: ok" or "FAIL"), and fails t when
// d exceeds it.
func CheckDiff(t testing.TB, what string, d Diff, scale float64, tol Tolerance) {
	t.Helper()
	verdict := "ok"
	if !(d.Max <= tol.Max*scale && d.Mean <= tol.Mean*scale) {
		verdict = "FAIL"
	}
	line := fmt.Sprintf("parity %s %s: max|Δ| %.3g mean|Δ| %.3g over %d values; tolerance %.3g / %.3g (%g × scale %.3g): %s",
		t.Name(), what, d.Max, d.Mean, d.N, tol.Max*scale, tol.Mean*scale, tol.Max, scale, verdict)
	if verdict != "ok" {
		t.Error(line)
		return
	}
	t.Log(line)
}
