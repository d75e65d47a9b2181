package train

import (
	"crypto/sha256"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"sync"
	"testing"

	"github.com/mempo/mempo/model/qwen2"
	"github.com/mempo/mempo/model/torch"
)

// TestConcurrentBFloat16Training is the reproducer of the defect libtorch 2.1.2 had on
// CPUs with AVX512-BF16 (README, known issues): two single-threaded workers, each
// training its own copy of the tiny model in bfloat16 on its own OS thread at once,
// crashed (a SIGSEGV in linear, or vector::reserve thrown from it) or computed wrong
// products within a few hundred steps. Here each worker runs the SFT forward and
// backward pass (NLLStep, context weight 0.1) on batches whose shapes change every step,
// and every step's loss and gradients must equal, bit for bit, what one thread computes
// alone for the same step afterwards. MEMPO_BF16_STRESS_STEPS sets the steps per worker
// (default 12; build/bf16_repro.sh runs it long, repeatedly).
func TestConcurrentBFloat16Training(t *testing.T) {
	steps := 12
	if s := os.Getenv("MEMPO_BF16_STRESS_STEPS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("MEMPO_BF16_STRESS_STEPS=%q: want a positive integer", s)
		}
		steps = n
	}
	cfg, err := qwen2.Preset("tiny", 512)
	if err != nil {
		t.Fatal(err)
	}
	const workers = 2
	models := make([]*qwen2.Model, workers)
	for w := range models {
		models[w], _ = initModel(t, cfg, qwen2.Options{DType: "bfloat16"})
		defer models[w].Drop()
	}
	// run runs every step of worker w on m, on an OS thread of its own (one intra-op thread).
	run := func(m *qwen2.Model, w int) (sums [][32]byte, err error) {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		for s := range steps {
			sum, err := sftStepSum(m, uint64(w), uint64(s))
			if err != nil {
				return nil, err
			}
			sums = append(sums, sum)
		}
		return sums, nil
	}
	got := make([][][32]byte, workers)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[w], errs[w] = run(models[w], w)
		}()
	}
	wg.Wait()
	for w := range workers {
		if errs[w] != nil {
			t.Fatalf("worker %d: %v", w, errs[w])
		}
		// The same steps again, one worker at a time, on the first model: the workers' models
		// are equal and their weights never change (no optimizer step).
		alone, err := func() ([][32]byte, error) {
			var sums [][32]byte
			var err error
			done := make(chan struct{})
			go func() { defer close(done); sums, err = run(models[0], w) }()
			<-done
			return sums, err
		}()
		if err != nil {
			t.Fatalf("worker %d alone: %v", w, err)
		}
		for s := range steps {
			if got[w][s] != alone[s] {
				t.Fatalf("worker %d step %d: loss and gradients computed beside another worker differ from the same step computed alone", w, s)
			}
		}
	}
}

// sftStepSum runs one SFT forward and backward pass on a batch drawn from (worker, step)
// and hashes the loss and every gradient, then zeroes the gradients.
func sftStepSum(m *qwen2.Model, worker, step uint64) ([32]byte, error) {
	rng := rand.New(rand.NewPCG(worker, step))
	batch := make([]qwen2.Pair, 2+rng.IntN(5))
	for i := range batch {
		batch[i] = qwen2.Pair{Context: randomIDs(rng, 8+rng.IntN(120), 512), Response: randomIDs(rng, 4+rng.IntN(60), 512)}
	}
	st := NLLStep{Model: m, ContextWeight: 0.1}
	loss, _, err := st.backward(batch, st.Totals(batch))
	if err != nil {
		return [32]byte{}, err
	}
	h := sha256.New()
	h.Write(binary.LittleEndian.AppendUint64(nil, math.Float64bits(loss)))
	for _, p := range m.Weights() {
		g := torch.Must(p.Tensor.Grad(false))
		for _, v := range torch.Values(g) {
			h.Write(binary.LittleEndian.AppendUint64(nil, math.Float64bits(v)))
		}
		torch.Check(g.Zero_())
		g.MustDrop()
	}
	var sum [32]byte
	h.Sum(sum[:0])
	return sum, nil
}
