package torchtest

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"

	"github.com/mempo/mempo/internal/procstat"
)

// The peak RSS of a process never falls, so a benchmark that compares peaks for
// several dataset sizes runs each size in a fresh child: the test binary itself,
// running one child test with the size in an environment variable.

// PeakRSSSizes runs the test named child once per size in a fresh copy of the test
// binary with env=size, and returns the peak RSS in MB each printed with
// PrintPeakRSS.
func PeakRSSSizes(b *testing.B, child, env string, sizes []int) []float64 {
	b.Helper()
	peaks := make([]float64, len(sizes))
	for i, n := range sizes {
		cmd := exec.Command(os.Args[0], "-test.run=^"+child+"$")
		cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d", env, n))
		out, err := cmd.CombinedOutput()
		if err != nil {
			b.Fatalf("%s with %s=%d: %v\n%s", child, env, n, err, out)
		}
		v, ok := lastPeak(string(out))
		if !ok {
			b.Fatalf("%s with %s=%d printed no peak:\n%s", child, env, n, out)
		}
		peaks[i] = v
	}
	return peaks
}

// ReportPeakRSS runs the test named child for 1k and then 10k items (PeakRSSSizes)
// and reports both peaks and their ratio: a stage whose memory is bounded by its batch,
// not its dataset, reports a ratio close to 1.
func ReportPeakRSS(b *testing.B, child, env string) {
	var peak []float64
	for b.Loop() {
		peak = PeakRSSSizes(b, child, env, []int{1000, 10000})
	}
	b.ReportMetric(peak[0], "MB_peak_1k")
	b.ReportMetric(peak[1], "MB_peak_10k")
	b.ReportMetric(peak[1]/peak[0], "10k/1k")
}

// ChildSize is the size a child test was started with, or false in a normal run,
// where the child test should return at once.
func ChildSize(env string) (int, bool) {
	n, err := strconv.Atoi(os.Getenv(env))
	return n, err == nil
}

// ResetPeakRSS returns what the Go heap holds free to the kernel and restarts the
// process's peak RSS at its current RSS (proc(5), clear_refs "5"), so that the peak a
// child reports is the stage's, not its fixture's.
func ResetPeakRSS(t testing.TB) {
	runtime.GC()
	debug.FreeOSMemory()
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		t.Fatalf("reset peak RSS: %v", err)
	}
}

// PrintPeakRSS prints the process's peak RSS since ResetPeakRSS (VmHWM) in the line
// PeakRSSSizes reads.
func PrintPeakRSS(t testing.TB) {
	mb := procstat.MB("VmHWM")
	if mb == 0 {
		t.Fatal("/proc/self/status has no VmHWM")
	}
	fmt.Printf("peak_rss_mb %.1f\n", mb)
}

func lastPeak(out string) (float64, bool) {
	v, ok := 0.0, false
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		if rest, found := strings.CutPrefix(sc.Text(), "peak_rss_mb "); found {
			if f, err := strconv.ParseFloat(rest, 64); err == nil {
				v, ok = f, true
			}
		}
	}
	return v, ok
}
