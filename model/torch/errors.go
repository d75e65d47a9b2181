package torch

import (
	"fmt"
	"runtime"

	"github.com/sugarme/gotch/ts"
)

// gotch's Must* functions call log.Fatal on a libtorch error, which no caller can
// recover from. Tensor code calls the error-returning variants through Must and Check,
// so a libtorch error is a panic, and each exported entry point turns it into an
// error with Catch.

// Must returns t, or panics with err.
func Must(t *ts.Tensor, err error) *ts.Tensor {
	if err != nil {
		panic(err)
	}
	return t
}

// Check panics with err from an op without a tensor result.
func Check(err error) {
	if err != nil {
		panic(err)
	}
}

// checked runs op, one libtch call, and panics with the error it raised. libtch keeps
// an op's error in a thread-local slot that a second cgo call reads (ts.TorchErr), and
// a goroutine not locked to its OS thread can move to another between the two calls
// when another goroutine takes its processor during a slow call (a failing op builds
// a backtrace). The error would then be lost, the op's nil result used later, and the
// error raised by whichever op next checks on the thread that failed. Here both calls
// run on one thread; LockOSThread nests, so a caller's own lock stays.
func checked(op func()) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	op()
	Check(ts.TorchErr())
}

// Catch converts a panic raised by tensor code into *err, prefixed with what; use it
// deferred in an exported function with a named error result. It converts the panics
// of Must and Check (libtorch errors) and the shape checks' messages. A runtime.Error
// (a nil dereference, an index out of range) is a bug, not a failed op: Catch panics
// again with it, and since the panicking frames are not yet unwound, the crash prints
// the stack of the original fault (house review 2026-12-01 §3.4).
func Catch(what string, err *error) {
	r := recover()
	switch r := r.(type) {
	case nil:
	case runtime.Error:
		panic(r)
	case error:
		*err = fmt.Errorf("%s: %w", what, r)
	default:
		*err = fmt.Errorf("%s: %v", what, r)
	}
}
