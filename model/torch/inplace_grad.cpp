// Autograd functions that add their weight's gradient into the weight's gradient slot
// in place, instead of handing a fresh full-size gradient to autograd (see
// inplace_grad.go for the measurements).
#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include <cstring>
#include <exception>

namespace {
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// gradSlot is w's gradient, created as zeros when w has none yet. The functions below
// write it only during a backward pass without create_graph, when AccumulateGrad
// itself would add into a defined gradient in place.
at::Tensor &gradSlot(const at::Tensor &w) {
  at::Tensor &g = w.mutable_grad();
  if (!g.defined()) {
    g = at::zeros_like(w, at::MemoryFormat::Contiguous);
  }
  return g;
}

// Embedding is at::embedding(w, ids) whose backward adds each row's gradient into
// w.grad with index_add_, row by row in token order as embedding_dense_backward does,
// and returns no gradient for w.
struct Embedding : public torch::autograd::Function<Embedding> {
  static at::Tensor forward(AutogradContext *ctx, at::Tensor w, at::Tensor ids) {
    ctx->set_materialize_grads(false);
    ctx->save_for_backward({w, ids});
    return at::embedding(w, ids);
  }

  static variable_list backward(AutogradContext *ctx, variable_list grads) {
    const at::Tensor &g = grads[0];
    if (g.defined()) {
      auto saved = ctx->get_saved_variables();
      const at::Tensor &w = saved[0], &ids = saved[1];
      gradSlot(w).index_add_(0, ids.reshape({-1}), g.reshape({-1, w.size(1)}));
    }
    return {at::Tensor(), at::Tensor()};
  }
};

// Linear is at::linear(x, w) without bias whose backward returns x's gradient as
// linear's does (g·w) and adds gᵀ·x into w.grad with addmm_, returning no gradient
// for w.
struct Linear : public torch::autograd::Function<Linear> {
  static at::Tensor forward(AutogradContext *ctx, at::Tensor x, at::Tensor w) {
    ctx->set_materialize_grads(false);
    ctx->save_for_backward({x, w});
    return at::linear(x, w);
  }

  static variable_list backward(AutogradContext *ctx, variable_list grads) {
    const at::Tensor &g = grads[0];
    if (!g.defined()) {
      return {at::Tensor(), at::Tensor()};
    }
    auto saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &w = saved[1];
    at::Tensor dx;
    if (ctx->needs_input_grad(0)) {
      dx = g.matmul(w);
    }
    if (w.requires_grad()) {
      auto g2 = g.reshape({-1, w.size(0)});
      gradSlot(w).addmm_(g2.t(), x.reshape({-1, w.size(1)}));
    }
    return {dx, at::Tensor()};
  }
};

// result stores t as a new handle in *out (libtch's tensor type) or returns the
// exception's message, malloc'd.
template <typename F> char *result(void **out, F f) {
  try {
    *out = new at::Tensor(f());
    return nullptr;
  } catch (const std::exception &e) {
    return strdup(e.what());
  }
}
} // namespace

extern "C" {
char *mempo_torch_embedding_inplace_grad(void **out, void *w, void *ids) {
  return result(out, [&] {
    return Embedding::apply(*static_cast<at::Tensor *>(w), *static_cast<at::Tensor *>(ids));
  });
}

char *mempo_torch_linear_inplace_grad(void **out, void *x, void *w) {
  return result(out, [&] {
    return Linear::apply(*static_cast<at::Tensor *>(x), *static_cast<at::Tensor *>(w));
  });
}
}
