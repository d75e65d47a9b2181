package torch

// #include <pthread.h>
import "C"

import (
	"runtime"
	"sync"
)

// glibc's malloc serves each OS thread from an arena of its own (up to 8 per core),
// and memory freed into an arena stays there for that arena's later allocations.
// libtorch allocates a step's tensors on the thread that runs the step, and a
// goroutine lands on whichever OS thread the scheduler gives it, so repeated training
// steps from one goroutine fill one arena after another, each to the step's working
// set. Measured on the tiny preset (16 turns × 256 tokens per micro-batch, about
// 580 MB of tensors): RSS stepped 800 → 1380 → 2010 MB over 40 micro-batches (one
// benchmark run grew 1.2 GB over 20), and stays at 840 ± 3 MB when they run through
// Do, on one OS thread whose allocations come from one arena, as PyTorch's single
// Python thread gets.

var thread struct {
	once sync.Once
	jobs chan func()
	self C.pthread_t // the torch thread
}

// Do runs f on the torch thread, one OS thread kept for tensor work that repeats per
// step, and returns when f has. Called from the torch thread itself (from inside
// another Do) it runs f directly. A panic in f with an error or string value (a
// libtorch error, a shape check) is raised again in the caller, where Catch converts
// it; a runtime.Error, a bug, crashes on the torch thread with its own stack, as
// Catch would. f must not call runtime.Goexit (a test's t.FailNow), which would end
// the torch thread.
func Do(f func()) {
	thread.once.Do(startThread)
	if onThread() {
		f()
		return
	}
	done := make(chan any, 1)
	thread.jobs <- func() {
		defer func() {
			r := recover()
			if _, bug := r.(runtime.Error); bug {
				panic(r)
			}
			done <- r
		}()
		f()
	}
	if r := <-done; r != nil {
		panic(r)
	}
}

// startThread starts the torch thread: a goroutine locked to its OS thread for the
// life of the process, running jobs one at a time.
func startThread() {
	thread.jobs = make(chan func())
	ready := make(chan C.pthread_t)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread and its arena live on
		ready <- C.pthread_self()
		for job := range thread.jobs {
			job()
		}
	}()
	thread.self = <-ready
}

// onThread reports whether the caller runs on the torch thread. Only the torch
// thread's goroutine, locked to it, ever runs there, so the answer cannot change
// under the caller.
func onThread() bool { return C.pthread_equal(C.pthread_self(), thread.self) != 0 }
