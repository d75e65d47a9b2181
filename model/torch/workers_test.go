package torch

import (
	"errors"
	"testing"
)

// TestParallel: every worker index runs once, each on a worker whose libtorch ops run
// single-threaded, and a worker's error panic reaches the caller.
func TestParallel(t *testing.T) {
	const n = 3
	var seen [n]int
	var threads [n]int
	Parallel(n, func(w int) {
		seen[w]++
		threads[w] = threadCount()
	})
	for w := range n {
		if seen[w] != 1 || threads[w] != 1 {
			t.Errorf("worker %d ran %d times at %d threads, want once at 1", w, seen[w], threads[w])
		}
	}
	boom := errors.New("boom")
	defer func() {
		if r := recover(); r != boom {
			t.Errorf("Parallel relayed %v, want the worker's panic %v", r, boom)
		}
	}()
	Parallel(2, func(w int) {
		if w == 1 {
			panic(boom)
		}
	})
}
