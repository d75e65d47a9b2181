package torch

// void mempo_torch_set_num_threads(int n);
import "C"

import (
	"runtime"
	"sync"
)

// Workers are OS threads kept for splitting a run of small tensor ops across cores
// (Parallel). Each runs its libtorch ops on one thread, as every thread but the torch
// thread does (see thread.go): an optimizer step is a dozen element-wise ops per
// cache-sized chunk, and at 2 threads, 0.5B-shaped with 2 layers, it ran at 1.0
// steps/s as OpenMP-parallel ops against 1.7 at one thread. Chunks spread over
// single-threaded workers fork nothing.
var workers struct {
	mu   sync.Mutex
	jobs []chan func()
}

// Parallel runs f(w) for every w in [0, n) at once, each on a worker of its own, and
// returns when all have; with n <= 1 it runs f(0) on the calling goroutine. A panic
// in f with an error or string value (a libtorch error) is raised again in the
// caller, where Catch converts it; a runtime.Error, a bug, crashes in the worker with
// its own stack. Calls are serialised: one Parallel runs at a time.
func Parallel(n int, f func(w int)) {
	if n <= 1 {
		f(0)
		return
	}
	workers.mu.Lock()
	defer workers.mu.Unlock()
	for len(workers.jobs) < n {
		startWorker()
	}
	fail := make([]any, n)
	var wg sync.WaitGroup
	for w := range n {
		wg.Add(1)
		workers.jobs[w] <- func() {
			defer wg.Done()
			defer keep(&fail[w])
			f(w)
		}
	}
	wg.Wait()
	raise(fail)
}

// Spread runs run(w) for every w in [0, n) at once, w = 0 on the calling goroutine
// and each other on a goroutine of its own (for host work such as sampling, not
// libtorch ops), and returns when all have. Panics are Parallel's: one with an error
// or string value (a NaN logit) is raised again in the caller; a runtime.Error, a bug,
// crashes where it happened, with its stack.
func Spread(n int, run func(w int)) {
	var wg sync.WaitGroup
	fail := make([]any, max(n, 1))
	for w := 1; w < n; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer keep(&fail[w])
			run(w)
		}()
	}
	func() {
		defer keep(&fail[0])
		run(0)
	}()
	wg.Wait()
	raise(fail)
}

// keep, deferred by a worker, records its panic in *fail unless the panic is a bug (a
// runtime.Error), which it lets crash the worker.
func keep(fail *any) {
	r := recover()
	if _, bug := r.(runtime.Error); bug {
		panic(r)
	}
	*fail = r
}

// raise panics with the first worker's panic, if any.
func raise(fail []any) {
	for _, r := range fail {
		if r != nil {
			panic(r)
		}
	}
}

// startWorker adds a worker: a goroutine locked to its OS thread for the life of the
// process, its libtorch ops single-threaded (MKL's own threading included, which an
// OpenMP count alone leaves at libtorch's setting).
func startWorker() {
	jobs := make(chan func())
	go func() {
		runtime.LockOSThread() // never unlocked: the thread keeps its count
		C.mempo_torch_set_num_threads(1)
		for job := range jobs {
			job()
		}
	}()
	workers.jobs = append(workers.jobs, jobs)
}
