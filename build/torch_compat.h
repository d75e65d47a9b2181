// What gotch v0.9.1's C++ layer needs from a libtorch newer than the 2.1 it was generated
// against. build/go.sh force-includes this header (-include) into every C++ file cgo
// compiles, so gotch's sources stay as the module cache has them.
//
// gotch generated a wrapper for every ATen op. A few ops have since changed their
// signature or been removed; their wrappers would no longer compile. mempo calls none of
// them, so each gets a stand-in with the old signature that fails at run time with a clear
// error (gotch's PROTECT turns the exception into the Go error), never a silent result.
// On libtorch 2.1 itself the library's own exact-match overloads win over the templates
// below, and the removed-op blocks are skipped, so nothing changes there.
#pragma once

#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include <torch/torch.h>

namespace mempo_compat {

[[noreturn]] inline void unavailable(const char *op) {
  throw std::runtime_error(
      std::string(op) + " is not available: gotch v0.9.1 was generated against libtorch 2.1, and libtorch " +
      std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR) +
      " changed or removed this op (mempo never calls it; build/torch_compat.h)");
}

// A value of type T that is never produced: the call throws first.
template <class T> T never(const char *op) { unavailable(op); }

} // namespace mempo_compat

namespace torch {

// Changed signatures: 2.1's call shapes no longer match the library's overloads, so the
// templates (which lose to any exact non-template match) take them.
using at::_cslt_sparse_mm;
template <class... A>
at::Tensor _cslt_sparse_mm(const at::Tensor &, const at::Tensor &, const at::Tensor &, const A &...) {
  return mempo_compat::never<at::Tensor>("_cslt_sparse_mm (libtorch 2.1 signature)");
}

using at::_scaled_mm;
template <class... A>
std::tuple<at::Tensor, at::Tensor> _scaled_mm(const at::Tensor &, const at::Tensor &, const at::Tensor &,
                                              const c10::optional<at::ScalarType> &, const A &...) {
  return mempo_compat::never<std::tuple<at::Tensor, at::Tensor>>("_scaled_mm (libtorch 2.1 signature)");
}

using at::_scaled_mm_out;
template <class... A>
std::tuple<at::Tensor, at::Tensor> _scaled_mm_out(at::Tensor &, at::Tensor &, const at::Tensor &, const at::Tensor &,
                                                  const at::Tensor &, const c10::optional<at::ScalarType> &,
                                                  const A &...) {
  return mempo_compat::never<std::tuple<at::Tensor, at::Tensor>>("_scaled_mm_out (libtorch 2.1 signature)");
}

// Removed ops (libtorch 2.15 dropped the deprecated cholesky/qr and named-tensor alignment).
#if !__has_include(<ATen/ops/align_tensors.h>)
template <class... A> std::vector<at::Tensor> align_tensors(const A &...) {
  return mempo_compat::never<std::vector<at::Tensor>>("align_tensors");
}
#endif
#if !__has_include(<ATen/ops/cholesky.h>)
template <class... A> at::Tensor cholesky(const A &...) { return mempo_compat::never<at::Tensor>("cholesky"); }
template <class... A> at::Tensor cholesky_out(const A &...) {
  return mempo_compat::never<at::Tensor>("cholesky_out");
}
#endif
#if !__has_include(<ATen/ops/qr.h>)
template <class... A> std::tuple<at::Tensor, at::Tensor> qr(const A &...) {
  return mempo_compat::never<std::tuple<at::Tensor, at::Tensor>>("qr");
}
template <class... A> std::tuple<at::Tensor, at::Tensor> qr_out(const A &...) {
  return mempo_compat::never<std::tuple<at::Tensor, at::Tensor>>("qr_out");
}
#endif

} // namespace torch

#if !__has_include(<ATen/ops/align_as.h>)
// Tensor::align_as is gone, and a member cannot be added from outside: gotch's call
// `self->align_as(other)` becomes `self->add(<throws>)`, whose argument throws before add runs.
#define align_as(other) add(mempo_compat::never<at::Tensor>("Tensor::align_as"))
#endif
