package torch

// #include <pthread.h>
// int mempo_torch_num_threads();
// void mempo_torch_set_num_threads(int n);
import "C"

import (
	"fmt"
	"runtime"
	"sync/atomic"
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

// Only the torch thread runs libtorch's intra-op threads; every other OS thread runs
// its ops on one. libgomp gives each OS thread that runs a parallel op an OpenMP team
// of its own, kept for the thread's life, and once a process holds more OpenMP threads
// than cores it lets idle team members spin only a hundred rounds before they sleep,
// so that every later parallel op wakes its team through the kernel. Go runs code on
// whichever OS thread the scheduler gives it, and each stray parallel op (loading a
// model, building the rotary tables, an optimizer worker's MKL square root) left a
// team behind: mempo sft at --threads 2 held six OpenMP workers, and the torch
// thread's own slept and woke about 2,000 times a second. So the work that wants the
// threads, training steps, the optimizer step, scoring and decoding, runs through Do,
// and with one team its worker spins between ops. At --threads 2 on the demo's data,
// alternating runs, before → after, outputs identical: SFT of 240 questions (bfloat16)
// 31-41 → 23-28 s, the memory and old log-prob passes 17.3-18.5 → 14.4-15.6 s, a
// rollout shard 12.0-12.8 → 8.9-10.3 s, an update 15.3-16.2 → 14.0-14.7 s.

var thread struct {
	jobs chan func()
	self atomic.Uint64 // the torch thread's pthread_t
}

// goexit is what a job that called runtime.Goexit sends back instead of a panic.
var goexit = new(int)

// Do runs f on the torch thread, one OS thread kept for tensor work, and returns when
// f has. Called from the torch thread itself (from inside another Do) it runs f
// directly. A panic in f with an error or string value (a libtorch error, a shape
// check) is raised again in the caller, where Catch converts it; a runtime.Error, a
// bug, crashes on the torch thread with its own stack, as Catch would. When f calls
// runtime.Goexit (a test's t.FailNow), the caller's goroutine exits too, and a new
// torch thread, at the same thread count, replaces the one that ended with f's.
func Do(f func()) {
	if onThread() {
		f()
		return
	}
	done := make(chan any, 1)
	thread.jobs <- func() {
		returned := false
		defer func() {
			r := recover()
			if _, bug := r.(runtime.Error); bug {
				panic(r)
			}
			if r == nil && !returned {
				r = goexit
				runThread(threadCount())
			}
			done <- r
		}()
		f()
		returned = true
	}
	switch r := <-done; r {
	case nil:
	case goexit:
		runtime.Goexit()
	default:
		panic(r)
	}
}

// The torch thread starts with the process, before any other thread can run a
// parallel op, at libtorch's default count (one per core, or OMP_NUM_THREADS); every
// other thread starts at one.
func init() {
	thread.jobs = make(chan func())
	runThread(0)
}

// runThread starts a torch thread, at n threads (0: libtorch's default): a goroutine
// locked to its OS thread for the goroutine's life, running jobs one at a time.
func runThread(n int) {
	ready := make(chan struct{})
	go func() {
		runtime.LockOSThread() // never unlocked: the thread and its arena live on
		if n > 0 {
			C.mempo_torch_set_num_threads(C.int(n))
		}
		C.mempo_torch_num_threads() // settles the count on this thread
		thread.self.Store(uint64(C.pthread_self()))
		close(ready)
		for job := range thread.jobs {
			job()
		}
	}()
	<-ready
	othersSingle()
}

// NumThreads reports the intra-op thread count of the torch thread.
func NumThreads() int {
	var n int
	Do(func() { n = threadCount() })
	return n
}

// SetNumThreads sets the intra-op thread count of the torch thread to n, which must be
// positive; every other OS thread stays at one.
func SetNumThreads(n int) error {
	if n < 1 {
		return fmt.Errorf("torch: threads %d, want >= 1", n)
	}
	Do(func() { C.mempo_torch_set_num_threads(C.int(n)) })
	othersSingle()
	return nil
}

// threadCount is the calling OS thread's intra-op thread count.
func threadCount() int { return int(C.mempo_torch_num_threads()) }

// othersSingle makes OS threads that have not yet run a libtorch op start at one
// intra-op thread. libtorch's process-wide count, which each thread's first parallel
// op copies, is set only together with the calling thread's own: a goroutine of its
// own sets both, and its thread, single-threaded, goes back to Go's pool.
func othersSingle() {
	done := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		C.mempo_torch_set_num_threads(1)
		close(done)
	}()
	<-done
}

// DoNoGrad runs f on the torch thread (Do) with autograd off, as scoring and decoding
// run: the thread's grad mode is restored after.
func DoNoGrad(f func()) {
	Do(func() {
		defer SetGrad(SetGrad(false))
		f()
	})
}

// onThread reports whether the caller runs on the torch thread. Only the torch
// thread's goroutine, locked to it, ever runs there, so the answer cannot change
// under the caller.
func onThread() bool { return C.pthread_equal(C.pthread_self(), C.pthread_t(thread.self.Load())) != 0 }
