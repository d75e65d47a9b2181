package torch

import (
	"errors"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/ts"
)

// catching runs f under Catch("op", &err) and returns err and what Catch panicked
// with, if anything.
func catching(f func()) (err error, repanic any) {
	defer func() { repanic = recover() }()
	func() {
		defer Catch("op", &err)
		f()
	}()
	return err, nil
}

func TestCatch(t *testing.T) {
	a := RawZeros([]int64{2, 3}, gotch.Float, gotch.CPU)
	defer a.Free()
	b := Must(ts.Zeros([]int64{2, 3}, gotch.Float, gotch.CPU))
	defer b.MustDrop()
	tests := []struct {
		name    string
		f       func()
		wantErr string // substrings of the error, separated by "…"; "" when Catch must panic again
	}{
		{"libtorch error", func() { a.Matmul(a).Free() }, "op: Libtorch API Error: …mat1 and mat2 shapes"}, // 2.15 says "mm: mat1…"
		{"gotch error through Must", func() { Must(b.Matmul(b, false)) }, "op: Matmul() failed: Libtorch API Error"},
		{"shape check message", func() { panic("attention: mask [2 1] for ids [2 3]") }, "op: attention: mask [2 1]"},
		{"nil dereference", func() {
			var p *struct{ x int }
			_ = p.x
		}, ""},
		{"index out of range", func() {
			var s []int64
			_ = s[len(a.Size())]
		}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			base := Live()
			err, repanic := catching(tc.f)
			if got := Live(); got != base {
				t.Errorf("Live() = %d after the op, want %d", got, base)
			}
			if tc.wantErr == "" {
				if _, ok := repanic.(runtime.Error); !ok || err != nil {
					t.Fatalf("Catch gave error %v and panicked with %v, want a runtime.Error panic", err, repanic)
				}
				return
			}
			if repanic != nil {
				t.Fatalf("Catch panicked with %v, want error %q", repanic, tc.wantErr)
			}
			for _, want := range strings.Split(tc.wantErr, "…") {
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Fatalf("Catch gave error %v, want one containing %q", err, want)
				}
			}
		})
	}
}

// TestCatchWraps checks that an error panic stays in the chain for errors.Is.
func TestCatchWraps(t *testing.T) {
	sentinel := errors.New("sentinel")
	err, _ := catching(func() { Check(sentinel) })
	if !errors.Is(err, sentinel) {
		t.Errorf("errors.Is(%v, sentinel) = false, want true", err)
	}
}

// TestErrorsStayWithTheirOp fails a libtorch op thousands of times from goroutines
// that are not locked to their OS threads while others keep the processors busy, so
// that a goroutine is often moved to another thread after a slow cgo call: every
// failing op must panic with its own error. Without both halves of the op (the call
// and the read of libtch's thread-local error) on one thread, 5 to 11 of these 20,000
// views returned a nil tensor instead (3 runs of 3), each error left for an unrelated
// op on the thread that raised it.
func TestErrorsStayWithTheirOp(t *testing.T) {
	x := RawZeros([]int64{2, 3}, gotch.Float, gotch.CPU)
	defer x.Free()
	stop := make(chan struct{})
	var busy sync.WaitGroup
	for range 4 {
		busy.Add(1)
		go func() {
			defer busy.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
			}
		}()
	}
	var wg sync.WaitGroup
	var lost, raised atomic.Int64
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 5000 {
				func() {
					defer func() {
						if r := recover(); r != nil {
							if err, ok := r.(error); !ok || !strings.Contains(err.Error(), "[7]") {
								t.Errorf("view as [7] failed with %v, want its own shape error", r)
							}
							raised.Add(1)
						}
					}()
					x.View(7) // 6 elements
					lost.Add(1)
				}()
			}
		}()
	}
	wg.Wait()
	close(stop)
	busy.Wait()
	if lost.Load() > 0 {
		t.Errorf("%d of %d failing views returned without an error", lost.Load(), lost.Load()+raised.Load())
	}
}
