// A C face of libtorch's c10d for Go: a TCPStore rendezvous and a Gloo process group,
// the objects torch.distributed.init_process_group("gloo", "env://") builds, and the
// three collectives training needs; CUDA tensors go through NCCL (nccl.hpp), as under
// torch.distributed's default "cuda:nccl,cpu:gloo". Every function returns NULL or a
// malloc'd message.
//
// build/go.sh defines MEMPO_GLOO when build/gloo.sh found Gloo's headers, which
// ProcessGroupGloo.hpp includes and the torch wheels do not ship; without them every
// function says so, and the package's tests skip.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>

#include <ATen/core/Tensor.h>

#ifdef MEMPO_GLOO
#ifndef USE_C10D_GLOO
#define USE_C10D_GLOO 1
#endif
#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "nccl.hpp"
#endif

namespace {

char *message(const std::string &s) { return strdup(s.c_str()); }

#ifdef MEMPO_GLOO
// A c10::Error's what() carries a C++ backtrace; its message alone is what a user reads.
char *message(const std::exception &e) {
  if (auto *ce = dynamic_cast<const c10::Error *>(&e)) {
    return message(ce->what_without_backtrace());
  }
  return message(std::string(e.what()));
}

struct Group {
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<c10d::ProcessGroupGloo> pg;
  std::chrono::milliseconds timeout;
  int rank, world;
  mempo_nccl::Communicator nccl; // for CUDA tensors, made on the first
};

// run runs a collective on group to its end or the group's timeout: f starts it and
// returns its work.
template <typename F> char *run(void *group, F f) {
  try {
    auto *g = static_cast<Group *>(group);
    f(g)->wait(g->timeout);
    return nullptr;
  } catch (const std::exception &e) {
    return message(e);
  }
}

// cuda runs f, a collective of CUDA tensors through NCCL that waits for itself.
template <typename F> char *cuda(void *group, F f) {
  try {
    f(static_cast<Group *>(group));
    return nullptr;
  } catch (const std::exception &e) {
    return message(e);
  }
}
#else
char *without() { return message(std::string("built without Gloo")); }
#endif

} // namespace

extern "C" {

// mempo_c10d_available is 1 when the package was built with Gloo.
int mempo_c10d_available(void) {
#ifdef MEMPO_GLOO
  return 1;
#else
  return 0;
#endif
}

// mempo_c10d_open joins the group of world processes as rank: rank 0 serves the
// TCPStore at addr:port and every rank connects to it, as torch.distributed's env://
// rendezvous does; then the Gloo process group connects every pair. Under torchrun's
// agent (attempt >= 0) the agent serves the store and every rank is its client, under
// the key prefix of this attempt, as torch.distributed does there. iface names the
// network interface Gloo binds to ("" lets it resolve this host's name, falling back to
// loopback), local_host the address to bind to instead ("" for none). Both the
// rendezvous and every later collective give up after timeout_ms.
char *mempo_c10d_open(void **out, const char *addr, int port, int rank, int world, int64_t timeout_ms,
                      const char *iface, const char *local_host, int attempt) {
#ifdef MEMPO_GLOO
  try {
    auto *g = new Group;
    g->timeout = std::chrono::milliseconds(timeout_ms);
    g->rank = rank;
    g->world = world;
    c10d::TCPStoreOptions so;
    so.port = static_cast<std::uint16_t>(port);
    so.isServer = rank == 0 && attempt < 0;
    so.numWorkers = world;
    so.waitWorkers = attempt < 0;
    so.timeout = g->timeout;
    try {
      g->store = c10::make_intrusive<c10d::TCPStore>(std::string(addr), so);
      if (attempt >= 0) {
        g->store = c10::make_intrusive<c10d::PrefixStore>("/worker/attempt_" + std::to_string(attempt), g->store);
      }
      auto opts = c10d::ProcessGroupGloo::Options::create(g->timeout);
      if (*iface) {
        opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(iface));
      } else if (*local_host) {
        opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(local_host));
      } else {
        opts->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
      }
      opts->threads = 1;
      g->pg = c10::make_intrusive<c10d::ProcessGroupGloo>(g->store, rank, world, opts);
    } catch (...) {
      delete g;
      throw;
    }
    *out = g;
    return nullptr;
  } catch (const std::exception &e) {
    return message(e);
  }
#else
  return message(std::string("built without Gloo's headers (build/gloo.sh could not fetch them)"));
#endif
}

// mempo_c10d_allreduce sums t, a dense contiguous tensor, over the group, in place.
char *mempo_c10d_allreduce(void *group, void *t) {
#ifdef MEMPO_GLOO
  auto &x = *static_cast<at::Tensor *>(t);
  if (x.is_cuda()) {
    return cuda(group, [&x](Group *g) { g->nccl.allreduce(x, *g->store, g->rank, g->world, g->timeout); });
  }
  return run(group, [&x](Group *g) {
    std::vector<at::Tensor> ts{x};
    c10d::AllreduceOptions o;
    o.reduceOp = c10d::ReduceOp::SUM;
    o.timeout = g->timeout;
    return g->pg->allreduce(ts, o);
  });
#else
  return without();
#endif
}

// mempo_c10d_broadcast copies root's t into every rank's t, in place.
char *mempo_c10d_broadcast(void *group, void *t, int root) {
#ifdef MEMPO_GLOO
  auto &x = *static_cast<at::Tensor *>(t);
  if (x.is_cuda()) {
    return cuda(group, [&x, root](Group *g) { g->nccl.broadcast(x, root, *g->store, g->rank, g->world, g->timeout); });
  }
  return run(group, [&x, root](Group *g) {
    std::vector<at::Tensor> ts{x};
    c10d::BroadcastOptions o;
    o.rootRank = root;
    o.timeout = g->timeout;
    return g->pg->broadcast(ts, o);
  });
#else
  return without();
#endif
}

// mempo_c10d_barrier returns once every rank has entered it.
char *mempo_c10d_barrier(void *group) {
#ifdef MEMPO_GLOO
  return run(group, [](Group *g) {
    c10d::BarrierOptions o;
    o.timeout = g->timeout;
    return g->pg->barrier(o);
  });
#else
  return without();
#endif
}

// mempo_c10d_nccl says whether this process has NCCL for CUDA tensors: NULL, or why not.
char *mempo_c10d_nccl(void) {
#ifdef MEMPO_GLOO
  try {
    mempo_nccl::api();
    return nullptr;
  } catch (const std::exception &e) {
    return message(e);
  }
#else
  return without();
#endif
}

// mempo_c10d_close frees the group: its connections and, on rank 0, the store's server.
void mempo_c10d_close(void *group) {
#ifdef MEMPO_GLOO
  delete static_cast<Group *>(group);
#endif
}

} // extern "C"
