// Facts about the linked libtorch that gotch does not expose.
#include <ATen/Parallel.h>
#include <torch/version.h>

extern "C" {
const char *mempo_torch_version() { return TORCH_VERSION; }
int mempo_torch_num_threads() { return at::get_num_threads(); }
void mempo_torch_set_num_threads(int n) { at::set_num_threads(n); }
}
