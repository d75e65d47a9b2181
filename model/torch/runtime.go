// Package torch is mempo's libtorch layer, under the model and the trainer: the
// process-wide runtime (the linked version, the intra-op thread pool, devices, grad
// mode), raw tensor handles and the ops the hot paths run on them (raw.go, ops.go),
// the copies between Go memory and tensors (host.go), dtypes (dtype.go), and the
// routing of libtorch errors into Go errors (errors.go). Only tensor code imports it.
package torch

// #cgo CXXFLAGS: -std=c++17
// const char *mempo_torch_version();
// int mempo_torch_num_threads();
// void mempo_torch_set_num_threads(int n);
// int mempo_torch_fix_mmap_threshold();
import "C"

import (
	"fmt"

	"github.com/sugarme/gotch"
	lib "github.com/sugarme/gotch/libtch"
)

// BoundHeap fixes glibc's mmap threshold (see runtime.cpp) so that peak RSS stays flat
// while a stage streams a dataset of any size through the model. Stages whose work grows
// with their input (log-prob scoring, rollout) call it; training stages do not, since
// the extra mapping work roughly halves their step rate and their working set is
// bounded by the batch.
func BoundHeap() { C.mempo_torch_fix_mmap_threshold() }

// WantVersion is the libtorch release gotch v0.9.1 is generated against.
const WantVersion = "2.1.2"

// Version reports the libtorch version the binary is linked with.
func Version() string { return C.GoString(C.mempo_torch_version()) }

// NumThreads reports the size of libtorch's intra-op thread pool.
func NumThreads() int { return int(C.mempo_torch_num_threads()) }

// SetNumThreads sets the intra-op thread pool size; n must be positive.
func SetNumThreads(n int) error {
	if n < 1 {
		return fmt.Errorf("torch: threads %d, want >= 1", n)
	}
	C.mempo_torch_set_num_threads(C.int(n))
	return nil
}

// Device resolves a --device value: "cpu", "cuda" or "cuda:N".
func Device(name string) (gotch.Device, error) {
	switch {
	case name == "cpu":
		return gotch.CPU, nil
	case name == "cuda" || len(name) > 5 && name[:5] == "cuda:":
		idx := 0
		if name != "cuda" {
			if _, err := fmt.Sscanf(name[5:], "%d", &idx); err != nil || idx < 0 {
				return gotch.CPU, fmt.Errorf("torch: device %q: want cpu, cuda or cuda:N", name)
			}
		}
		if !gotch.CUDA.IsAvailable() {
			return gotch.CPU, fmt.Errorf("torch: device %q: CUDA is not available in this libtorch build or on this machine", name)
		}
		if n := int(gotch.CUDA.DeviceCount()); idx >= n {
			return gotch.CPU, fmt.Errorf("torch: device %q: only %d CUDA devices", name, n)
		}
		return gotch.CudaBuilder(uint(idx)), nil
	default:
		return gotch.CPU, fmt.Errorf("torch: device %q: want cpu, cuda or cuda:N", name)
	}
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
