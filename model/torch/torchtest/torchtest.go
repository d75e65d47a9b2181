// Package torchtest holds the test and benchmark helpers of the tensor packages: float
// comparison, random token ids, collector pressure, thread pinning, the
// fastest-iteration timer, and the machine's measured roofline (fp32 GEMM rate and copy
// bandwidth) that throughput is reported as a fraction of (DESIGN.md §10).
package torchtest

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/mempo/mempo/model/torch"
	"github.com/sugarme/gotch"
)

// ForThreads runs f as one sub-benchmark per thread count ("threads=N"), the count of
// the torch thread, where the timed ops run (TimeLoop, Measure).
func ForThreads(b *testing.B, counts []int, f func(b *testing.B)) {
	for _, n := range counts {
		b.Run(fmt.Sprintf("threads=%d", n), func(b *testing.B) {
			old := torch.NumThreads()
			if err := torch.SetNumThreads(n); err != nil {
				b.Fatal(err)
			}
			defer torch.SetNumThreads(old)
			f(b)
		})
	}
}

var (
	rooflineMu sync.Mutex
	gemmRate   = map[int]float64{}
	copyRate   = map[int]float64{}
)

// Measure calls op on the torch thread for 300 ms after one warm-up call and returns
// the calls per second of the fastest call: the peak rate, less the time other
// processes took. Each call ends when the benchmark device has finished its work (Sync).
func Measure(op func()) float64 {
	op = onTorchThread(op)
	op()
	Sync()
	var best time.Duration
	for start := time.Now(); time.Since(start) < 300*time.Millisecond; {
		t := time.Now()
		op()
		Sync()
		if d := time.Since(t); best == 0 || d < best {
			best = d
		}
	}
	return 1 / best.Seconds()
}

// TimeLoop calls op on the torch thread once untimed, then once per b.Loop iteration,
// and returns the fastest iteration. On a shared machine the minimum drops the time
// other processes took (as in stages/logprob BenchmarkLogprobPasses); ns/op keeps the
// mean. Each call ends when the benchmark device has finished its work (Sync). An op
// that calls b.Fatal ends the benchmark as it would on the benchmark's goroutine
// (torch.Do passes its runtime.Goexit on).
func TimeLoop(b *testing.B, op func()) time.Duration {
	op = onTorchThread(op)
	op()
	Sync()
	var best time.Duration
	for b.Loop() {
		t := time.Now()
		op()
		Sync()
		if d := time.Since(t); best == 0 || d < best {
			best = d
		}
	}
	return best
}

// onTorchThread is op run on the torch thread (torch.Do), the one thread whose
// libtorch ops use the threads ForThreads sets.
func onTorchThread(op func()) func() { return func() { torch.Do(op) } }

// GEMMFLOPS is libtorch's matmul throughput at the torch thread's thread count, on
// the benchmark device in its dtype (Device, DType; the CPU in float32 by default),
// measured on first use per count: the denominator of gemm-fraction. The product is
// 1024³ on the CPU and 4096³ on an accelerator, where a smaller one measures the
// kernel launch rather than the arithmetic.
func GEMMFLOPS() float64 {
	rooflineMu.Lock()
	defer rooflineMu.Unlock()
	threads := torch.NumThreads()
	if r, ok := gemmRate[threads]; ok {
		return r
	}
	dev := benchDevice()
	n := int64(1024)
	if dev.IsCuda() {
		n = 4096
	}
	a := torch.RawZeros([]int64{n, n}, benchDType(), dev)
	defer a.Free()
	gemmRate[threads] = 2 * float64(n*n*n) * Measure(func() { a.Matmul(a).Free() })
	return gemmRate[threads]
}

// ReportRate reports tokens/s over all iterations, best-tokens/s of the fastest
// iteration best, the gemm-fraction of flopsPerIter in that iteration and the GEMM
// rate it is a fraction of.
func ReportRate(b *testing.B, best time.Duration, tokensPerIter int, flopsPerIter float64) {
	b.ReportMetric(float64(tokensPerIter*b.N)/b.Elapsed().Seconds(), "tokens/s")
	b.ReportMetric(float64(tokensPerIter)/best.Seconds(), "best-tokens/s")
	b.ReportMetric(flopsPerIter/best.Seconds()/GEMMFLOPS(), "gemm-fraction")
	b.ReportMetric(GEMMFLOPS()/1e9, "gemm-GFLOP/s")
}

// CopyBandwidth is the bytes per second libtorch's copy_ moves between two 256 MiB
// float32 tensors (read plus write) on the benchmark device at the torch thread's
// thread count, measured on first use per count: the denominator of bw-fraction.
func CopyBandwidth() float64 {
	rooflineMu.Lock()
	defer rooflineMu.Unlock()
	threads := torch.NumThreads()
	if r, ok := copyRate[threads]; ok {
		return r
	}
	const n = 64 << 20
	dev := benchDevice()
	src := torch.RawZeros([]int64{n}, gotch.Float, dev)
	dst := torch.RawZeros([]int64{n}, gotch.Float, dev)
	defer torch.Free(src, dst)
	copyRate[threads] = 2 * 4 * n * Measure(func() { dst.CopyFrom(src) })
	return copyRate[threads]
}

// CollectorPressure starts a goroutine that leaves gotch tensors to their finalizers and
// runs the garbage collector in a loop, as a long run's collector would at any moment;
// the returned func stops it. Tests run passes under it to show that no tensor they
// hold is freed behind their back.
func CollectorPressure() (stop func()) {
	var wg sync.WaitGroup
	done := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			for range 8 {
				_ = torch.RawZeros([]int64{8}, gotch.Float, gotch.CPU).Wrap()
			}
			runtime.GC()
		}
	}()
	return func() { close(done); wg.Wait() }
}

// MaxAbsDiff is the largest |a[i] − b[i]|, +Inf when the lengths differ.
func MaxAbsDiff(a, b []float32) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	d := 0.0
	for i := range a {
		d = max(d, math.Abs(float64(a[i]-b[i])))
	}
	return d
}

// RandomTokens is n token ids drawn uniformly from [0, vocab).
func RandomTokens(rng *rand.Rand, n, vocab int) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = rng.Int64N(int64(vocab))
	}
	return out
}
