package torch

// #include <stdlib.h>
// char *mempo_torch_embedding_inplace_grad(void **out, void *w, void *ids);
// char *mempo_torch_linear_inplace_grad(void **out, void *x, void *w);
import "C"

import (
	"errors"
	"unsafe"

	lib "github.com/sugarme/gotch/libtch"
)

// The tied embedding of Qwen2.5-0.5B (vocab × hidden, 544 MB of float32) got three
// fresh full-size tensors from every backward pass through autograd's own ops: the
// zeros embedding_dense_backward scatters the rows' gradients into, the head's mm
// weight gradient, and their out-of-place sum in autograd's InputBuffer (the head's
// gradient arrives as a transposed view, which InputBuffer cannot add into in place).
// Each is a fresh mapping whose pages the kernel zeroes on first touch. The functions
// here differentiate their input as the plain ops do but add the weight's gradient
// into the weight's gradient slot in place, which the optimizer has made a view into
// its flat buffer, so nothing vocab × hidden is allocated per backward. Measured by
// train's BenchmarkMicroBackward (a micro-batch of 2×256 tokens on the 0.5B shape
// with two layers, 2 threads, old and new alternating on a loaded machine): minor
// page faults 551-564k → 152k, system time 1.19 → 0.30-0.34 s, wall time 0.74-0.82×,
// peak RSS 5.8-6.3 → 4.1 GB; the weights' gradients are bit-identical except the
// embedding's (relative L2 difference 2e-8, float32 rounding of the sum's order).
//
// They do not support higher-order gradients: the weight's gradient is written
// outside autograd, as AccumulateGrad writes it when the backward pass builds no graph.

// EmbeddingInPlaceGrad is w.Embedding(ids): rows of w: [vocab, dim] looked up by ids
// (int64, any shape) into [ids..., dim]. A backward pass adds the rows' gradients
// into w's gradient in place with index_add_ (creating it as zeros when w has none)
// instead of through a dense vocab × dim gradient. On the CPU index_add_ adds the
// rows one after another in token order; on a GPU it adds them with atomics, in no
// fixed order.
func (w Raw) EmbeddingInPlaceGrad(ids Raw) Raw {
	return cpp(func(out *unsafe.Pointer) *C.char {
		return C.mempo_torch_embedding_inplace_grad(out, unsafe.Pointer(w.c), unsafe.Pointer(ids.c))
	})
}

// LinearInPlaceGrad is x.Linear(w, None): x: [..., in] times wᵀ, w: [out, in], into
// [..., out]. A backward pass returns x's gradient as Linear's does and adds w's,
// gᵀ·x, into w's gradient in place with addmm_ (creating it as zeros when w has
// none) instead of allocating it.
func (x Raw) LinearInPlaceGrad(w Raw) Raw {
	return cpp(func(out *unsafe.Pointer) *C.char {
		return C.mempo_torch_linear_inplace_grad(out, unsafe.Pointer(x.c), unsafe.Pointer(w.c))
	})
}

// RequiresGrad reports whether autograd tracks x.
func (x Raw) RequiresGrad() bool {
	var r bool
	checked(func() { r = lib.AtRequiresGrad(x.c) })
	return r
}

// cpp runs a function of this package's C++ that stores a new tensor handle in *out
// or returns a malloc'd error message, which becomes a panic as Check's.
func cpp(f func(out *unsafe.Pointer) *C.char) Raw {
	var out unsafe.Pointer
	if msg := f(&out); msg != nil {
		defer C.free(unsafe.Pointer(msg))
		panic(errors.New(C.GoString(msg)))
	}
	liveRaws.Add(1)
	return Raw{lib.Ctensor(out)}
}
