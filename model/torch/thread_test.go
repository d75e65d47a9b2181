package torch

import (
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/sugarme/gotch"
)

// TestDo checks the torch thread's contract: calls from any goroutine run on one OS
// thread, a nested call runs inline instead of deadlocking, and an error panic comes
// back to the caller.
func TestDo(t *testing.T) {
	var wg sync.WaitGroup
	var off atomic.Int32
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			Do(func() {
				if !onThread() {
					off.Add(1)
				}
			})
		}()
	}
	wg.Wait()
	if n := off.Load(); n != 0 {
		t.Errorf("Do from 8 goroutines ran %d calls off the torch thread, want 0", n)
	}
	if onThread() {
		t.Errorf("the test goroutine runs on the torch thread, want another")
	}

	nested := false
	Do(func() { Do(func() { nested = onThread() }) })
	if !nested {
		t.Errorf("nested Do ran off the torch thread, want inline on it")
	}

	want := errors.New("libtorch says no")
	var err error
	func() {
		defer Catch("op", &err)
		Do(func() { panic(want) })
	}()
	if !errors.Is(err, want) {
		t.Errorf("Do(panic(%v)) caught as %v, want an error wrapping it", want, err)
	}
}

// TestDoGoexit: f's runtime.Goexit (a t.FailNow) ends the caller's goroutine, not
// the process's tensor work: a new torch thread at the same count takes later calls.
func TestDoGoexit(t *testing.T) {
	old := NumThreads()
	defer SetNumThreads(old)
	if err := SetNumThreads(2); err != nil {
		t.Fatal(err)
	}
	var before, after uint64
	Do(func() { before = thread.self.Load() })
	returned := make(chan bool)
	go func() {
		defer func() { returned <- false }()
		Do(runtime.Goexit)
		returned <- true
	}()
	if <-returned {
		t.Fatal("Do(runtime.Goexit) returned to its caller, want the caller's goroutine to exit")
	}
	var n int
	Do(func() {
		after = thread.self.Load()
		n = threadCount()
	})
	if after == before || n != 2 {
		t.Errorf("after a Goexit the torch thread is %v (was %v) at %d threads, want a new one at 2", after, before, n)
	}
}

// TestSetNumThreads: the count is the torch thread's, and it follows later calls even
// once the thread has run parallel ops (libtorch sets a thread's own count on its first
// one); every other OS thread, fresh or used, runs its ops on one thread, so that the
// torch thread's OpenMP team is the process's only one.
func TestSetNumThreads(t *testing.T) {
	old := NumThreads()
	if old < 1 {
		t.Fatalf("NumThreads() = %d, want >= 1", old)
	}
	defer SetNumThreads(old)
	parallelOp := func() {
		x := RawFromHost(make([]float32, 1<<16), []int64{1 << 16}, gotch.CPU)
		x.Free() // a parallel-capable op, so the calling thread's count is initialised
	}
	for _, n := range []int{2, 1, 2} {
		if err := SetNumThreads(n); err != nil {
			t.Fatal(err)
		}
		var got int
		Do(func() {
			parallelOp()
			got = threadCount()
		})
		if got != n || NumThreads() != n {
			t.Errorf("after SetNumThreads(%d): the torch thread runs %d threads, NumThreads() = %d", n, got, NumThreads())
		}
		for _, got := range otherThreads(4, parallelOp) {
			if got != 1 {
				t.Errorf("after SetNumThreads(%d): another OS thread runs %d threads, want 1", n, got)
			}
		}
	}
	if err := SetNumThreads(0); err == nil {
		t.Error("SetNumThreads(0) = nil, want error")
	}
}

// otherThreads runs op on k OS threads at once, none the torch thread, and returns
// each one's thread count after it. The goroutines end locked, which ends their
// threads, so each call needs new ones.
func otherThreads(k int, op func()) []int {
	counts := make([]int, k)
	var ran, exit sync.WaitGroup
	ran.Add(k)
	exit.Add(1)
	for i := range k {
		go func() {
			runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
			op()
			counts[i] = threadCount()
			ran.Done()
			exit.Wait()
		}()
	}
	ran.Wait()
	exit.Done()
	return counts
}
