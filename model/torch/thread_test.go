package torch

import (
	"errors"
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

// TestSetNumThreadsReachesTorchThread: OpenMP keeps a thread count per OS thread and
// libtorch sets a thread's own on its first parallel op, so the torch thread, once
// used, must follow later SetNumThreads calls made from other threads.
func TestSetNumThreadsReachesTorchThread(t *testing.T) {
	old := NumThreads()
	defer SetNumThreads(old)
	for _, n := range []int{1, 2, 1} {
		if err := SetNumThreads(n); err != nil {
			t.Fatal(err)
		}
		var got int
		Do(func() {
			x := RawFromHost(make([]float32, 1<<16), []int64{1 << 16}, gotch.CPU)
			x.Free() // a parallel-capable op, so the torch thread's count is initialised
			got = NumThreads()
		})
		if got != n {
			t.Errorf("after SetNumThreads(%d): the torch thread runs %d threads", n, got)
		}
	}
}
