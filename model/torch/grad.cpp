// Access to a tensor's gradient slot, which gotch reads (atg_grad) but cannot set.
#include <ATen/core/Tensor.h>
#include <torch/csrc/autograd/autograd.h>

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

// mempo_torch_leaf stores in *out a tensor that shares t's storage, has no autograd
// history and requires grad (t.detach().requires_grad_()); it returns a malloc'd
// error message or NULL.
char *mempo_torch_leaf(void **out, void *t) {
  try {
    *out = new at::Tensor(static_cast<at::Tensor *>(t)->detach().requires_grad_(true));
    return nullptr;
  } catch (const std::exception &e) {
    return strdup(e.what());
  }
}

// mempo_torch_backward runs torch.autograd.backward(roots, grads) without keeping the
// graph; it returns a malloc'd error message or NULL.
char *mempo_torch_backward(void **roots, void **grads, int n) {
  try {
    std::vector<at::Tensor> r, g;
    for (int i = 0; i < n; ++i) {
      r.push_back(*static_cast<at::Tensor *>(roots[i]));
      g.push_back(*static_cast<at::Tensor *>(grads[i]));
    }
    torch::autograd::backward(r, g, /*keep_graph=*/false, /*create_graph=*/false);
    return nullptr;
  } catch (const std::exception &e) {
    return strdup(e.what());
  }
}
}
