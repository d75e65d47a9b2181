// Package torch is mempo's libtorch layer, under the model and the trainer: the
// process-wide runtime (the linked version, the intra-op thread pool, devices, grad
// mode), raw tensor handles and the ops the hot paths run on them (raw.go, ops.go),
// the copies between Go memory and tensors (host.go), dtypes (dtype.go), and the
// routing of libtorch errors into Go errors (errors.go). Only tensor code imports it.
package torch

// #cgo CXXFLAGS: -std=c++17
// const char *mempo_torch_version();
// int mempo_torch_cuda_built();
// #include <stddef.h>
// void mempo_torch_bound_heap();
// void mempo_torch_trim_heap();
// void mempo_torch_heap_stats(size_t *live, size_t *idle, size_t *peak);
import "C"

import (
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/sugarme/gotch"
	lib "github.com/sugarme/gotch/libtch"
)

// BoundHeap installs a caching allocator for libtorch's CPU tensor buffers of 1 MiB and
// more (runtime.cpp's BlockCache): each is a mapping of its own, kept when its tensor
// dies and reused by the next request it fits, with resident bytes held within twice
// the peak live bytes since the last TrimHeap. Peak RSS then stays flat while a stage
// streams a dataset of any size through the model, and a pass's buffers are faulted in
// once rather than on every op (measurements in runtime.cpp). Every tensor stage calls
// it once; it cannot be undone. Stages whose work grows with their input (log-prob
// scoring, rollout) also TrimHeap after each shard. Training steps repeat one working
// set, which the cache keeps mapped: on the update of the 0.5B shape with two layers
// (BenchmarkUpdateAdamW05BShape2L, 2×256 tokens with the AdamW step) it cut minor
// page faults from 3.2M to 1.0M and a step from 3.4-4.1 s to 2.9-3.4 s, for 0.27 GB
// more peak RSS (4.07 GB).
func BoundHeap() {
	C.mempo_torch_bound_heap()
}

// TrimHeap unmaps the buffers BoundHeap's cache holds idle and returns glibc's free
// heap pages to the kernel, so what one shard needed does not stay resident for the
// next. It costs the next pass one page fault per page of its working set: call it
// between shards, not between the batches of a pass.
func TrimHeap() {
	C.mempo_torch_trim_heap()
}

// HeapStats reports the bytes of BoundHeap's cache: in live tensors, and idle.
func HeapStats() (live, idle int64) {
	var l, i, p C.size_t
	C.mempo_torch_heap_stats(&l, &i, &p)
	return int64(l), int64(i)
}

// HeapPeak reports the most bytes BoundHeap's cache has held in live tensors since the
// last TrimHeap: the peak tensor memory of what ran in between, buffers under 1 MiB
// aside.
func HeapPeak() int64 {
	var l, i, p C.size_t
	C.mempo_torch_heap_stats(&l, &i, &p)
	return int64(p)
}

// Version reports the libtorch version the binary is linked with.
func Version() string { return C.GoString(C.mempo_torch_version()) }

// Device resolves a --device value: "cpu", "cuda" or "cuda:N". A CUDA device this
// process cannot use is an error that says why: the binary is linked against a
// CPU-only libtorch, no device is visible, or N is past the last visible one.
func Device(name string) (gotch.Device, error) {
	idx, cuda, err := parseDevice(name)
	if err != nil || !cuda {
		return gotch.CPU, err
	}
	count := 0
	built := CUDABuilt()
	if built {
		count = int(gotch.CUDA.DeviceCount())
	}
	if err := cudaUsable(name, idx, built, count); err != nil {
		return gotch.CPU, err
	}
	return gotch.CudaBuilder(uint(idx)), nil
}

// localCUDA is the index "cuda" names: 0, or this rank's GPU (UseLocalCUDA).
var localCUDA atomic.Int32

// UseLocalCUDA makes --device cuda mean cuda:idx in this process: a rank of a training
// run that a launcher started several of on one machine takes the GPU of its local
// rank (torchrun's LOCAL_RANK), as torch.cuda.set_device(local_rank) does. An explicit
// cuda:N is kept.
func UseLocalCUDA(idx int) { localCUDA.Store(int32(idx)) }

// CUDABuilt reports whether the linked libtorch has CUDA support (libtorch_cuda), with
// or without a device to run on.
func CUDABuilt() bool { return C.mempo_torch_cuda_built() != 0 }

// parseDevice splits a --device value into whether it names CUDA and the CUDA index.
func parseDevice(name string) (idx int, cuda bool, err error) {
	switch {
	case name == "cpu":
		return 0, false, nil
	case name == "cuda":
		return int(localCUDA.Load()), true, nil
	case strings.HasPrefix(name, "cuda:"):
		if i, err := strconv.Atoi(name[5:]); err == nil && i >= 0 {
			return i, true, nil
		}
	}
	return 0, false, fmt.Errorf("torch: device %q: want cpu, cuda or cuda:N", name)
}

// cudaUsable says why CUDA device idx cannot run, given whether the linked libtorch
// has CUDA support and how many devices it sees; nil when it can.
func cudaUsable(name string, idx int, built bool, count int) error {
	switch {
	case !built:
		return fmt.Errorf("torch: device %q: this binary is linked against a CPU-only libtorch; to run on a GPU, build the CUDA "+
			"binaries with LIBTORCH=python (a Python whose torch has CUDA) or 'make build CUDA=1' (into bin/cuda/)", name)
	case count == 0:
		return fmt.Errorf("torch: device %q: no CUDA device is visible "+
			"(CUDA build linked, device count 0; check CUDA_VISIBLE_DEVICES and the driver)", name)
	case idx >= count:
		return fmt.Errorf("torch: device %q: only %d CUDA device(s) visible, cuda:0 to cuda:%d "+
			"(check CUDA_VISIBLE_DEVICES)", name, count, count-1)
	}
	return nil
}

// GradEnabled reports whether autograd records ops on this OS thread, which rules
// out in-place ops on tensors a backward formula saves.
func GradEnabled() bool {
	prev := SetGrad(false)
	SetGrad(prev)
	return prev
}

// SetGrad sets this OS thread's grad mode and returns the previous one; callers pin
// the goroutine with runtime.LockOSThread first. libtch widens the C int it returns by
// reading eight bytes from a four-byte variable, so only the low 32 bits are the mode;
// gotch's GradSetEnabled compares all 64 and reports false for a stray high bit.
func SetGrad(on bool) bool {
	v := 0
	if on {
		v = 1
	}
	return int32(lib.AtGradSetEnabled(v)) != 0
}
