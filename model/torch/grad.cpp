// Access to a tensor's gradient slot, which gotch reads (atg_grad) but cannot set.
#include <ATen/core/Tensor.h>

#include <cstring>
#include <exception>

extern "C" {
// mempo_torch_set_grad makes g the gradient of t, as Python's `t.grad = g` does after
// its checks; it returns a malloc'd error message or NULL.
char *mempo_torch_set_grad(void *t, void *g) {
  try {
    static_cast<at::Tensor *>(t)->mutable_grad() = *static_cast<at::Tensor *>(g);
    return nullptr;
  } catch (const std::exception &e) {
    return strdup(e.what());
  }
}

// mempo_torch_grad_is is -1 when t has no gradient, 1 when its gradient is g itself
// (the same TensorImpl, so the same storage, offset and shape), and 0 otherwise.
int mempo_torch_grad_is(void *t, void *g) {
  const at::Tensor &grad = static_cast<at::Tensor *>(t)->grad();
  if (!grad.defined()) {
    return -1;
  }
  return grad.unsafeGetTensorImpl() == static_cast<at::Tensor *>(g)->unsafeGetTensorImpl();
}
}
