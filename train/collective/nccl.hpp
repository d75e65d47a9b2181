// NCCL for the CUDA tensors of a c10d group, as torch.distributed's default backend
// "cuda:nccl,cpu:gloo" does: c10d's own ProcessGroupNCCL needs the CUDA toolkit's
// headers to compile against, which no torch wheel ships, so the group drives NCCL's C
// API itself, as vLLM's pynccl does. Nothing is linked: a CUDA build of mempo already
// loads libnccl.so.2 and libcudart (libtorch_cuda needs both), and the few functions
// below are looked up in the process. A CPU build has no CUDA tensor to send here.
//
// The communicator is made on the first CUDA collective (rank 0's unique id travels
// through the group's TCPStore) on the tensor's device; every call runs on the legacy
// default stream, where libtorch launched the kernels that wrote the tensor, and is
// waited for by polling the stream and NCCL's asynchronous error against the group's
// timeout: a rank that died or hangs aborts the communicator, and the call fails.
#pragma once

#include <dlfcn.h>

#include <chrono>
#include <cstdint>
#include <future>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

namespace mempo_nccl {

// The parts of NCCL's and the CUDA runtime's stable C ABI used here (nccl.h 2.x,
// cuda_runtime_api.h): enums travel as int, handles as pointers.
struct UniqueId {
  char internal[128];
};
using Comm = void *;
constexpr int kSuccess = 0, kInProgress = 7, kSum = 0;
constexpr int kCudaNotReady = 600;

struct Api {
  int (*getUniqueId)(UniqueId *);
  int (*commInitRank)(Comm *, int, UniqueId, int);
  int (*allReduce)(const void *, void *, size_t, int, int, Comm, void *);
  int (*broadcast)(const void *, void *, size_t, int, int, Comm, void *);
  int (*commGetAsyncError)(Comm, int *);
  int (*commAbort)(Comm);
  int (*commDestroy)(Comm);
  const char *(*getErrorString)(int);
  int (*cudaSetDevice)(int);
  int (*cudaStreamQuery)(void *);
  const char *(*cudaGetErrorString)(int);
};

template <typename T> bool find(T &fn, const char *name, std::string &missing) {
  fn = reinterpret_cast<T>(dlsym(RTLD_DEFAULT, name));
  if (!fn) missing += std::string(missing.empty() ? "" : ", ") + name;
  return fn != nullptr;
}

// api returns NCCL's functions, or throws naming those the process lacks.
inline const Api &api() {
  static Api a;
  static std::string missing = [] {
    std::string m;
    find(a.getUniqueId, "ncclGetUniqueId", m);
    find(a.commInitRank, "ncclCommInitRank", m);
    find(a.allReduce, "ncclAllReduce", m);
    find(a.broadcast, "ncclBroadcast", m);
    find(a.commGetAsyncError, "ncclCommGetAsyncError", m);
    find(a.commAbort, "ncclCommAbort", m);
    find(a.commDestroy, "ncclCommDestroy", m);
    find(a.getErrorString, "ncclGetErrorString", m);
    find(a.cudaSetDevice, "cudaSetDevice", m);
    find(a.cudaStreamQuery, "cudaStreamQuery", m);
    find(a.cudaGetErrorString, "cudaGetErrorString", m);
    return m;
  }();
  if (!missing.empty()) {
    throw std::runtime_error("NCCL: this process has no " + missing +
                             " (a CUDA build loads them with libtorch_cuda: libnccl.so.2, libcudart)");
  }
  return a;
}

// dtype is NCCL's ncclDataType_t for t's elements.
inline int dtype(const at::Tensor &t) {
  switch (t.scalar_type()) {
  case at::kChar: return 0;
  case at::kByte: return 1;
  case at::kInt: return 2;
  case at::kLong: return 4;
  case at::kHalf: return 6;
  case at::kFloat: return 7;
  case at::kDouble: return 8;
  case at::kBFloat16: return 9;
  default: throw std::runtime_error(std::string("NCCL: no reduction for ") + c10::toString(t.scalar_type()));
  }
}

// Communicator is one rank's NCCL communicator, made on its first use.
class Communicator {
public:
  ~Communicator() {
    if (comm_) {
      const Api &a = api();
      failed_ ? a.commAbort(comm_) : a.commDestroy(comm_);
    }
  }

  void allreduce(const at::Tensor &t, c10d::Store &store, int rank, int world, std::chrono::milliseconds timeout) {
    prepare(t, store, rank, world, timeout);
    const Api &a = api();
    check(a.allReduce(t.data_ptr(), t.data_ptr(), t.numel(), dtype(t), kSum, comm_, nullptr), "all-reduce");
    wait(timeout, "all-reduce");
  }

  void broadcast(const at::Tensor &t, int root, c10d::Store &store, int rank, int world,
                 std::chrono::milliseconds timeout) {
    prepare(t, store, rank, world, timeout);
    const Api &a = api();
    check(a.broadcast(t.data_ptr(), t.data_ptr(), t.numel(), dtype(t), root, comm_, nullptr), "broadcast");
    wait(timeout, "broadcast");
  }

private:
  Comm comm_ = nullptr;
  int device_ = -1;
  bool failed_ = false;

  // prepare checks t and makes the communicator on t's device when there is none.
  void prepare(const at::Tensor &t, c10d::Store &store, int rank, int world, std::chrono::milliseconds timeout) {
    if (failed_) throw std::runtime_error("NCCL: the communicator failed earlier");
    if (!t.is_contiguous()) throw std::runtime_error("NCCL: the tensor is not contiguous");
    const Api &a = api();
    int dev = t.device().index();
    if (comm_ && dev != device_) {
      throw std::runtime_error("NCCL: a tensor on cuda:" + std::to_string(dev) + ", the communicator on cuda:" +
                               std::to_string(device_));
    }
    // The device is per OS thread; set it on the calling one every time.
    cuda(a.cudaSetDevice(dev), "cudaSetDevice");
    if (!comm_) init(store, rank, world, timeout, dev);
  }

  void init(c10d::Store &store, int rank, int world, std::chrono::milliseconds timeout, int dev) {
    const Api &a = api();
    UniqueId id{};
    const std::string key = "mempo/nccl/unique_id";
    if (rank == 0) {
      check(a.getUniqueId(&id), "ncclGetUniqueId");
      store.set(key, std::vector<uint8_t>(id.internal, id.internal + sizeof id.internal));
    } else {
      auto v = store.get(key); // waits up to the store's timeout
      if (v.size() != sizeof id.internal) throw std::runtime_error("NCCL: the unique id in the store has the wrong size");
      std::copy(v.begin(), v.end(), id.internal);
    }
    // ncclCommInitRank waits for every rank and has no timeout of its own: it runs on a
    // thread of its own, which a rank that never comes leaves behind, failed.
    auto done = std::make_shared<std::promise<std::pair<int, Comm>>>();
    auto result = done->get_future();
    std::thread([done, id, world, rank, dev] {
      const Api &a = api();
      Comm c = nullptr;
      int r = a.cudaSetDevice(dev);
      if (r == 0) r = a.commInitRank(&c, world, id, rank);
      done->set_value({r, c});
    }).detach();
    if (result.wait_for(timeout) != std::future_status::ready) {
      failed_ = true;
      throw std::runtime_error("NCCL: ncclCommInitRank: not every rank joined within the timeout");
    }
    auto [r, c] = result.get();
    check(r, "ncclCommInitRank");
    comm_ = c;
    device_ = dev;
  }

  // wait returns once the stream has run the call, or aborts the communicator when NCCL
  // reports an error or the timeout passes.
  void wait(std::chrono::milliseconds timeout, const char *what) {
    const Api &a = api();
    auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      int q = a.cudaStreamQuery(nullptr);
      if (q == 0) return;
      if (q != kCudaNotReady) {
        failed_ = true;
        throw std::runtime_error(std::string("NCCL: ") + what + ": CUDA: " + a.cudaGetErrorString(q));
      }
      int async = kSuccess;
      a.commGetAsyncError(comm_, &async);
      if (async != kSuccess && async != kInProgress) {
        abort();
        throw std::runtime_error(std::string("NCCL: ") + what + ": " + a.getErrorString(async));
      }
      if (std::chrono::steady_clock::now() > deadline) {
        abort();
        throw std::runtime_error(std::string("NCCL: ") + what + ": not done within the timeout (a rank died or hangs)");
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  void abort() {
    failed_ = true;
    api().commAbort(comm_);
    comm_ = nullptr;
  }

  void check(int r, const char *what) {
    if (r != kSuccess && r != kInProgress) {
      failed_ = true;
      throw std::runtime_error(std::string("NCCL: ") + what + ": " + api().getErrorString(r));
    }
  }

  void cuda(int r, const char *what) {
    if (r != 0) throw std::runtime_error(std::string("NCCL: ") + what + ": CUDA: " + api().cudaGetErrorString(r));
  }
};

} // namespace mempo_nccl
