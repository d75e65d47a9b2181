package torch

import (
	"crypto/sha256"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"sync"
	"testing"

	"github.com/sugarme/gotch"
)

// TestConcurrentBFloat16Products is the reproducer of the defect libtorch 2.1.2 had on
// CPUs with AVX512-BF16: two OS threads running bfloat16 products at once made oneDNN
// build kernels from a stale description, which then computed wrong results silently or
// crashed (a SIGSEGV in linear, or vector::reserve thrown from it), within a few hundred
// steps of two single-threaded SFT workers. Here two single-threaded OS threads run the
// products of a training step at shapes that change every step (a padded batch width
// times the tiny preset's 64/256/704-wide layers, forward and both backward products),
// and every product's bytes must equal what one thread alone computes for the same step.
// MEMPO_BF16_STRESS_STEPS sets the steps per thread (default 60; build/bf16_repro.sh
// runs it long, repeatedly).
func TestConcurrentBFloat16Products(t *testing.T) {
	steps := 60
	if s := os.Getenv("MEMPO_BF16_STRESS_STEPS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("MEMPO_BF16_STRESS_STEPS=%q: want a positive integer", s)
		}
		steps = n
	}
	const workers = 2
	got := make([][][32]byte, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread() // a thread of its own, at one intra-op thread (othersSingle)
			defer runtime.UnlockOSThread()
			for s := range steps {
				got[w] = append(got[w], bf16Step(uint64(w), uint64(s)))
			}
		}()
	}
	wg.Wait()
	for w := range workers {
		for s := range steps {
			var want [32]byte
			Do(func() { want = bf16Step(uint64(w), uint64(s)) })
			if got[w][s] != want {
				t.Fatalf("worker %d step %d: the concurrent bfloat16 products differ from the same products run alone", w, s)
			}
		}
	}
}

// bf16Step runs the three products of one linear layer's training step in bfloat16 at
// a shape drawn from (worker, step) and hashes their bytes.
func bf16Step(worker, step uint64) [32]byte {
	rng := rand.New(rand.NewPCG(worker, step))
	widths := []int64{64, 256, 704}
	rows := 1 + rng.Int64N(384)
	in, out := widths[rng.IntN(3)], widths[rng.IntN(3)]
	x := randomBF16(rng, []int64{rows, in})
	w := randomBF16(rng, []int64{out, in})
	dy := randomBF16(rng, []int64{rows, out})
	defer func() { x.Free(); w.Free(); dy.Free() }()
	h := sha256.New()
	y := x.Linear(w, None) // forward: x·wᵀ
	h.Write(y.Bytes())
	y.Free()
	dx := dy.Matmul(w) // input gradient: dy·w
	h.Write(dx.Bytes())
	dx.Free()
	dyT := dy.Transpose(0, 1)
	dw := dyT.Matmul(x) // weight gradient: dyᵀ·x
	h.Write(dw.Bytes())
	dyT.Free()
	dw.Free()
	var sum [32]byte
	h.Sum(sum[:0])
	return sum
}

func randomBF16(rng *rand.Rand, shape []int64) Raw {
	n := shape[0] * shape[1]
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(rng.NormFloat64())
	}
	f := RawFromHost(v, shape, gotch.CPU)
	defer f.Free()
	return f.ToDType(gotch.BFloat16)
}
