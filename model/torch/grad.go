package torch

// #include <stdlib.h>
// char *mempo_torch_set_grad(void *t, void *g);
// int mempo_torch_grad_is(void *t, void *g);
import "C"

import (
	"errors"
	"unsafe"

	lib "github.com/sugarme/gotch/libtch"
	"github.com/sugarme/gotch/ts"
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
	c := lib.AtShallowClone(x.c)
	Check(ts.TorchErr())
	liveRaws.Add(1)
	return Raw{c}
}
