package torch

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
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
