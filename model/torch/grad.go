package torch

// #include <stdlib.h>
// char *mempo_torch_set_grad(void *t, void *g);
// int mempo_torch_grad_is(void *t, void *g);
// char *mempo_torch_leaf(void **out, void *t);
// char *mempo_torch_backward(void **roots, void **grads, int n);
import "C"

import (
	"errors"
	"fmt"
	"unsafe"

	lib "github.com/sugarme/gotch/libtch"
)

// A gradient slot can hold a view into a buffer the caller owns: libtorch's
// AccumulateGrad adds each backward's gradient into a defined gradient in place when
// grad mode is off during backward (it is, unless the graph is built for double
// backward), so the view keeps receiving the gradients. An optimizer over flat
// buffers uses this to make every parameter's gradient a slice of one buffer.

// Grad is x's gradient, an undefined tensor when it has none; the result shares
// storage with the gradient.
func (x Raw) Grad() Raw { return call(func(o *lib.Ctensor) { lib.AtgGrad(o, x.c) }) }

// AttachGrad makes g the gradient of x (x.grad = g): g itself, not a copy, so later
// backward passes accumulate into g's storage. g must have x's shape, dtype and device;
// libtorch's AccumulateGrad checks them on the next backward.
func (x Raw) AttachGrad(g Raw) {
	if msg := C.mempo_torch_set_grad(unsafe.Pointer(x.c), unsafe.Pointer(g.c)); msg != nil {
		defer C.free(unsafe.Pointer(msg))
		panic(errors.New(C.GoString(msg)))
	}
}

// GradIs reports whether x has a gradient and whether that gradient is g itself, as
// AttachGrad left it (and not a tensor a backward pass put in its place).
func (x Raw) GradIs(g Raw) (defined, same bool) {
	switch C.mempo_torch_grad_is(unsafe.Pointer(x.c), unsafe.Pointer(g.c)) {
	case -1:
		return false, false
	case 1:
		return true, true
	}
	return true, false
}

// ClearGrad leaves x without a gradient (x.grad = None).
func (x Raw) ClearGrad() { x.AttachGrad(None) }

// Alias is a second handle to x itself (not a view): the same tensor, with its
// autograd metadata and gradient, which stays alive until both handles are freed.
func (x Raw) Alias() Raw {
	var c lib.Ctensor
	checked(func() { c = lib.AtShallowClone(x.c) })
	liveRaws.Add(1)
	return Raw{c}
}

// Leaf is a tensor sharing x's storage with no autograd history that requires grad
// (x.detach().requires_grad_()): the input of a segment of a network whose forward
// pass is recomputed for its backward pass, which leaves the segment's input gradient
// in the leaf's Grad.
func (x Raw) Leaf() Raw {
	return cpp(func(out *unsafe.Pointer) *C.char { return C.mempo_torch_leaf(out, unsafe.Pointer(x.c)) })
}

// Backward runs the backward pass from roots given their gradients, grads[i] of
// roots[i]'s shape (torch.autograd.backward(roots, grads)), accumulating into the
// leaves' gradients; the graph is freed.
func Backward(roots, grads []Raw) {
	if len(roots) != len(grads) || len(roots) == 0 {
		panic(fmt.Sprintf("backward: %d roots and %d gradients, want as many and at least one", len(roots), len(grads)))
	}
	// The handles go to C in C memory: cgo forbids Go memory holding Go pointers.
	n := len(roots)
	mem := C.malloc(C.size_t(2 * n * int(unsafe.Sizeof(unsafe.Pointer(nil)))))
	defer C.free(mem)
	ptrs := unsafe.Slice((*unsafe.Pointer)(mem), 2*n)
	for i := range n {
		ptrs[i], ptrs[n+i] = unsafe.Pointer(roots[i].c), unsafe.Pointer(grads[i].c)
	}
	if msg := C.mempo_torch_backward(&ptrs[0], &ptrs[n], C.int(n)); msg != nil {
		defer C.free(unsafe.Pointer(msg))
		panic(errors.New(C.GoString(msg)))
	}
}
