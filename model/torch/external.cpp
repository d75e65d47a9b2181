// Tensors over memory libtorch does not own (external.go).
#include <ATen/ATen.h>

#include <cstring>

extern "C" {
// mempo_torch_from_memory stores in *out a 1-D CPU tensor of numel elements of
// scalar_type over data, which it neither copies nor frees, or returns the
// exception's message, malloc'd.
char *mempo_torch_from_memory(void **out, void *data, int64_t numel, int scalar_type) {
  try {
    auto opts = at::TensorOptions().dtype(static_cast<at::ScalarType>(scalar_type)).device(at::kCPU);
    *out = new at::Tensor(at::from_blob(data, {numel}, opts));
    return nullptr;
  } catch (const std::exception &e) {
    return strdup(e.what());
  }
}
}
