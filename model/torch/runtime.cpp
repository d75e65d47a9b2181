// Facts about the linked libtorch that gotch does not expose, and the process's heap
// policy for tensor buffers.
#include <ATen/Parallel.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>
#include <malloc.h>
#include <sys/mman.h>
#include <torch/version.h>
#include <unistd.h>

#include <cstdint>
#include <list>
#include <map>
#include <mutex>
#include <unordered_map>

extern "C" {
const char *mempo_torch_version() { return TORCH_VERSION; }
int mempo_torch_num_threads() { return at::get_num_threads(); }
// Sets the calling thread's intra-op thread count and the process-wide one that threads
// yet to run a parallel op start from (at::set_num_threads sets both). at::get_num_threads
// first settles this thread's lazy initialisation, which would otherwise reset its count
// from the process-wide one on its first parallel op.
void mempo_torch_set_num_threads(int n) {
  at::get_num_threads();
  at::set_num_threads(n);
}
// libtorch_cuda registers its CUDA hooks when it loads; a CPU-only libtorch has none, and
// then reports zero devices just as a CUDA one does on a machine without a visible GPU.
int mempo_torch_cuda_built() { return at::CUDAHooksRegistry()->Has("CUDAHooks"); }
}

// libtorch 2.1's c10::Allocator::allocate is const and it has no copy_data; later
// releases (2.11 and 2.15 checked) drop the const and make copy_data pure virtual.
#define MEMPO_LIBTORCH_2_1 (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR <= 1)
#if MEMPO_LIBTORCH_2_1
#define MEMPO_ALLOCATE_CONST const
#else
#define MEMPO_ALLOCATE_CONST
#endif

namespace {
// BlockCache is the CPU allocator BoundHeap installs: tensor buffers of kMinBlock
// bytes and more are page-aligned mappings of their own that are kept when their
// tensor dies and handed to the next request they fit, so a forward pass's buffers
// are faulted in once instead of on every op; smaller ones go to malloc as before.
//
// Why: glibc serves large buffers from the heap until they outgrow its dynamic mmap
// threshold (at most 32 MiB), and the heap fragments: peak RSS of log-prob scoring grew
// with the dataset (BenchmarkPeakRSS). A fixed 1 MiB threshold bounded it, but then
// every large tensor was a fresh mapping whose pages the kernel zeroes, and even
// glibc's default pays that for the attention scores above 32 MiB. Measured on the
// old log-prob pass (BenchmarkOldPass, tiny preset, 2 threads, 27k tokens): 10.3k
// tokens/s on glibc's default heap, 10.8k with the cache, where the 1 MiB threshold
// cost about 35%; and peak RSS scoring 1k vs 10k sequences (BenchmarkPeakRSS):
// 307 -> 324 MB with the cache, 266 -> 283 MB at the 1 MiB threshold, 589 -> 897 MB
// on the default heap.
//
// Resident bytes (live plus idle blocks) stay within twice the peak live bytes since
// the last trim: a miss first unmaps the least recently freed idle blocks. A cached
// block serves any request of at least half its size, since batch shapes change with
// the padded width and exact sizes rarely repeat across batches.
class BlockCache final : public c10::Allocator {
 public:
  static BlockCache &get() {
    // Never destroyed: tensors freed during exit still find it.
    static BlockCache *c = new BlockCache();
    return *c;
  }

  c10::DataPtr allocate(size_t n) MEMPO_ALLOCATE_CONST override {
    void *p = n < kMinBlock ? c10::alloc_cpu(n) : const_cast<BlockCache *>(this)->take(n);
    return {p, p, &release, c10::Device(c10::DeviceType::CPU)};
  }

  c10::DeleterFnPtr raw_deleter() const override { return &release; }

#if !MEMPO_LIBTORCH_2_1
  void copy_data(void *dest, const void *src, std::size_t n) const override { default_copy_data(dest, src, n); }
#endif

  // trim unmaps every idle block and restarts the peak.
  void trim() {
    std::lock_guard<std::mutex> g(mu_);
    while (!idle_.empty()) evictOldest();
    peak_ = live_bytes_;
  }

  void stats(size_t *live, size_t *idle, size_t *peak) {
    std::lock_guard<std::mutex> g(mu_);
    *live = live_bytes_;
    *idle = idle_bytes_;
    *peak = peak_;
  }

 private:
  static constexpr size_t kMinBlock = 1 << 20;

  struct Block {
    void *p;
    size_t size;
  };
  using IdleList = std::list<Block>;  // least recently freed first

  // release is every buffer's deleter. Blocks are page-aligned mappings, so a pointer
  // off a page boundary came from malloc and skips the lock.
  static void release(void *p) {
    if (p == nullptr) return;
    BlockCache &c = get();
    if (reinterpret_cast<uintptr_t>(p) % c.page_ != 0 || !c.give(p)) c10::free_cpu(p);
  }

  // take returns an idle block of n to 2n bytes, else a fresh mapping.
  void *take(size_t n) {
    std::lock_guard<std::mutex> g(mu_);
    auto it = by_size_.lower_bound(n);
    Block b;
    if (it != by_size_.end() && it->first / 2 <= n) {
      b = *it->second;
      idle_.erase(it->second);
      by_size_.erase(it);
      idle_bytes_ -= b.size;
    } else {
      b = fresh(n);
    }
    live_.emplace(b.p, b.size);
    live_bytes_ += b.size;
    peak_ = std::max(peak_, live_bytes_);
    return b.p;
  }

  Block fresh(size_t n) {
    size_t size = (n + page_ - 1) / page_ * page_;
    size_t bound = 2 * std::max(peak_, live_bytes_ + size);
    while (!idle_.empty() && live_bytes_ + idle_bytes_ + size > bound) evictOldest();
    void *p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED && !idle_.empty()) {
      while (!idle_.empty()) evictOldest();
      p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    }
    TORCH_CHECK(p != MAP_FAILED, "mempo BlockCache: mmap of ", size, " bytes failed: out of memory");
    return {p, size};
  }

  // give makes p idle if it is one of the cache's blocks.
  bool give(void *p) {
    std::lock_guard<std::mutex> g(mu_);
    auto it = live_.find(p);
    if (it == live_.end()) return false;
    size_t size = it->second;
    live_.erase(it);
    live_bytes_ -= size;
    idle_.push_back({p, size});
    by_size_.emplace(size, std::prev(idle_.end()));
    idle_bytes_ += size;
    return true;
  }

  void evictOldest() {
    Block b = idle_.front();
    auto [lo, hi] = by_size_.equal_range(b.size);
    for (auto it = lo; it != hi; ++it) {
      if (it->second == idle_.begin()) {
        by_size_.erase(it);
        break;
      }
    }
    idle_.pop_front();
    idle_bytes_ -= b.size;
    munmap(b.p, b.size);
  }

  const size_t page_ = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  std::mutex mu_;
  std::unordered_map<void *, size_t> live_;  // cache blocks in use: address -> size
  IdleList idle_;
  std::multimap<size_t, IdleList::iterator> by_size_;  // idle blocks by size
  size_t live_bytes_ = 0, idle_bytes_ = 0, peak_ = 0;
};

}  // namespace

extern "C" {
// mempo_torch_bound_heap installs BlockCache as libtorch's CPU allocator, above any
// other (SetCPUAllocator keeps the highest priority).
void mempo_torch_bound_heap() { c10::SetCPUAllocator(&BlockCache::get(), UINT8_MAX); }

// mempo_torch_trim_heap unmaps BlockCache's idle blocks and returns glibc's free
// pages to the kernel.
void mempo_torch_trim_heap() {
  BlockCache::get().trim();
  malloc_trim(0);
}

void mempo_torch_heap_stats(size_t *live, size_t *idle, size_t *peak) { BlockCache::get().stats(live, idle, peak); }

}
