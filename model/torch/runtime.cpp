// Facts about the linked libtorch that gotch does not expose.
#include <ATen/Parallel.h>
#include <malloc.h>
#include <torch/version.h>

extern "C" {
const char *mempo_torch_version() { return TORCH_VERSION; }
int mempo_torch_num_threads() { return at::get_num_threads(); }
void mempo_torch_set_num_threads(int n) { at::set_num_threads(n); }

// A fixed mmap threshold: tensor buffers above 1 MiB get their own mappings and go back
// to the kernel when freed. glibc otherwise raises the threshold after each large free,
// serves later tensors from the heap, and the heap fragments. Measured on log-prob
// scoring of 1k vs 10k sequences (BenchmarkPeakRSS): peak RSS 589 -> 897 MB with glibc's
// default, 266 -> 283 MB at 1 MiB, 292 -> 482 MB at 4 MiB, 261 -> 272 MB at 128 KiB. The
// price is mapping cost: the tiny forward benchmark ran at about 9k tokens/s at 1 MiB
// against 8k at 128 KiB and 12-14k with the default.
int mempo_torch_fix_mmap_threshold() { return mallopt(M_MMAP_THRESHOLD, 1 << 20); }
}
