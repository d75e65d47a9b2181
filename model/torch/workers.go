package torch

// #include <stddef.h>
// int mempo_torch_set_thread_threads(int n);
import "C"

import (
	"runtime"
	"sync"
)

// Workers are OS threads kept for splitting a run of small tensor ops across cores
// (Parallel). Each runs its libtorch ops on one OpenMP thread: libgomp starts an
// OpenMP team for every OS thread that runs a parallel op, and once a process holds
// more OpenMP threads than cores it lets idle team members spin only a hundred rounds
// before they sleep, so that every later parallel op pays a futex wake-up per worker.
// An optimizer step is a dozen element-wise ops per cache-sized chunk; at 2 threads,
// 0.5B-shaped with 2 layers, it ran at 1.0 steps/s against 1.7 at one thread
// (OMP_WAIT_POLICY=active, which lengthens that spin, gave 2.3). Chunks spread over
// single-threaded workers fork nothing.
var workers struct {
	mu     sync.Mutex
	jobs   []chan func()
	serial bool // the OpenMP runtime would not let a worker go single-threaded
}

// Parallel runs f(w) for every w in [0, n) at once, each on a worker of its own, and
// returns when all have; with n <= 1 it runs f(0) on the calling goroutine. A panic
// in f with an error or string value (a libtorch error) is raised again in the
// caller, where Catch converts it; a runtime.Error, a bug, crashes in the worker with
// its own stack. Calls are serialised: one Parallel runs at a time. When the OpenMP
// runtime cannot be told to keep a worker single-threaded (it always can with the
// pinned libtorch), everything runs as f(0), …, f(n-1) on the caller.
func Parallel(n int, f func(w int)) {
	if n <= 1 {
		f(0)
		return
	}
	workers.mu.Lock()
	defer workers.mu.Unlock()
	for len(workers.jobs) < n && !workers.serial {
		workers.serial = !startWorker()
	}
	if workers.serial {
		for w := range n {
			f(w)
		}
		return
	}
	fail := make([]any, n)
	var wg sync.WaitGroup
	for w := range n {
		wg.Add(1)
		workers.jobs[w] <- func() {
			defer wg.Done()
			defer func() {
				r := recover()
				if _, bug := r.(runtime.Error); bug {
					panic(r)
				}
				fail[w] = r
			}()
			f(w)
		}
	}
	wg.Wait()
	for _, r := range fail {
		if r != nil {
			panic(r)
		}
	}
}

// startWorker adds a worker: a goroutine locked to its OS thread for the life of the
// process, made single-threaded for libtorch before its first job. It reports false,
// adding none, when the OpenMP runtime has no omp_set_num_threads.
func startWorker() bool {
	jobs := make(chan func())
	ok := make(chan bool)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread keeps its OpenMP count
		single := C.mempo_torch_set_thread_threads(1) != 0
		ok <- single
		if !single {
			return
		}
		for job := range jobs {
			job()
		}
	}()
	if !<-ok {
		return false
	}
	workers.jobs = append(workers.jobs, jobs)
	return true
}
