// Package collective joins the processes of one training run into a group through
// libtorch's c10d, the engine under torch.distributed: a TCPStore rendezvous at the
// address torchrun gives every process (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE), and
// a Gloo process group over TCP that sums, broadcasts and waits across processes on one
// machine or many. CUDA tensors go through NCCL instead, as under torch.distributed's
// default backend "cuda:nccl,cpu:gloo": the NCCL a CUDA build of libtorch loads. The processes are ranks of one command (mempo-update, mempo sft), so
// a job launches them with torchrun, srun or a Kubernetes Job as it launches PyTorch's.
//
// The Gloo process group is the one compiled into libtorch_cpu; its headers come from
// build/gloo.sh. Built without them, Open fails with ErrUnavailable.
package collective

// #include <stdint.h>
// #include <stdlib.h>
// int mempo_c10d_available(void);
// char *mempo_c10d_open(void **out, const char *addr, int port, int rank, int world, int64_t timeout_ms, const char *iface, const char *local_host, int attempt);
// char *mempo_c10d_allreduce(void *group, void *t);
// char *mempo_c10d_broadcast(void *group, void *t, int root);
// char *mempo_c10d_barrier(void *group);
// char *mempo_c10d_nccl(void);
// void mempo_c10d_close(void *group);
import "C"

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"time"
	"unsafe"

	"github.com/mempo/mempo/model/torch"
)

var (
	// ErrUnavailable marks a build without the Gloo backend.
	ErrUnavailable = errors.New("no collective backend: built without Gloo's headers (build/gloo.sh)")
	// ErrConfig marks a rendezvous configuration that cannot be right.
	ErrConfig = errors.New("invalid rendezvous")
	// ErrFailed marks a collective that failed or timed out: a rank died, hung or
	// could not be reached. The group cannot be used after it.
	ErrFailed = errors.New("collective failed")
)

// Available reports whether this build has a collective backend.
func Available() bool { return C.mempo_c10d_available() == 1 }

// NCCL reports whether collectives of CUDA tensors can run: nil in a CUDA build, whose
// libtorch_cuda loads NCCL, else an error naming what the process lacks. CPU tensors
// always go through Gloo.
func NCCL() error {
	msg := C.mempo_c10d_nccl()
	if msg == nil {
		return nil
	}
	defer C.free(unsafe.Pointer(msg))
	return errors.New(C.GoString(msg))
}

// Config says how a process joins its group.
type Config struct {
	Addr    string        // rank 0's host, where the TCPStore listens (MASTER_ADDR)
	Port    int           // the TCPStore's port (MASTER_PORT)
	Rank    int           // this process's rank in [0, World) (RANK)
	World   int           // processes in the group (WORLD_SIZE)
	Timeout time.Duration // the most the rendezvous or any collective may wait
	// Iface is the network interface Gloo binds to (GLOO_SOCKET_IFNAME, as
	// torch.distributed reads it); empty binds to the address this host's name
	// resolves to, or to loopback when Addr is a loopback address.
	Iface string
	// Agent says torchrun's agent serves the TCPStore (TORCHELASTIC_USE_AGENT_STORE):
	// every rank is a client, its keys under the prefix of the agent's Attempt
	// (TORCHELASTIC_RESTART_COUNT). Otherwise rank 0 serves it.
	Agent   bool
	Attempt int
	// LocalRank is this process's rank among those on its machine (LOCAL_RANK; 0 when
	// unset): the GPU a rank takes with --device cuda.
	LocalRank int
}

// The variables torchrun (and torch.distributed's env:// rendezvous) set.
const (
	EnvAddr  = "MASTER_ADDR"
	EnvPort  = "MASTER_PORT"
	EnvRank  = "RANK"
	EnvWorld = "WORLD_SIZE"
	EnvIface = "GLOO_SOCKET_IFNAME"
	EnvLocal = "LOCAL_RANK"
	// torchrun's agent serves the store itself and says so, with its restart count.
	EnvAgentStore = "TORCHELASTIC_USE_AGENT_STORE"
	EnvRestarts   = "TORCHELASTIC_RESTART_COUNT"
)

// FromEnv reads the rendezvous torchrun sets up, through getenv; ok is false when
// WORLD_SIZE is unset (no launcher). MASTER_PORT defaults to 29500, as in PyTorch.
func FromEnv(getenv func(string) string) (cfg Config, ok bool, err error) {
	w := getenv(EnvWorld)
	if w == "" {
		return Config{}, false, nil
	}
	cfg = Config{Addr: getenv(EnvAddr), Port: 29500, Iface: getenv(EnvIface)}
	if cfg.World, err = strconv.Atoi(w); err != nil {
		return cfg, true, fmt.Errorf("%s=%q: not a number: %w", EnvWorld, w, ErrConfig)
	}
	r := getenv(EnvRank)
	if cfg.Rank, err = strconv.Atoi(r); err != nil {
		return cfg, true, fmt.Errorf("%s=%q with %s=%s: not a number: %w", EnvRank, r, EnvWorld, w, ErrConfig)
	}
	if p := getenv(EnvPort); p != "" {
		if cfg.Port, err = strconv.Atoi(p); err != nil {
			return cfg, true, fmt.Errorf("%s=%q: not a number: %w", EnvPort, p, ErrConfig)
		}
	}
	if l := getenv(EnvLocal); l != "" {
		if cfg.LocalRank, err = strconv.Atoi(l); err != nil || cfg.LocalRank < 0 {
			return cfg, true, fmt.Errorf("%s=%q: want a rank >= 0: %w", EnvLocal, l, ErrConfig)
		}
	}
	if cfg.Agent = getenv(EnvAgentStore) == "True"; cfg.Agent {
		if n := getenv(EnvRestarts); n != "" {
			if cfg.Attempt, err = strconv.Atoi(n); err != nil {
				return cfg, true, fmt.Errorf("%s=%q: not a number: %w", EnvRestarts, n, ErrConfig)
			}
		}
	}
	return cfg, true, cfg.check()
}

func (c Config) check() error {
	switch {
	case c.World < 1:
		return fmt.Errorf("world size %d: want >= 1: %w", c.World, ErrConfig)
	case c.Rank < 0 || c.Rank >= c.World:
		return fmt.Errorf("rank %d outside the world of %d: %w", c.Rank, c.World, ErrConfig)
	case c.World > 1 && c.Addr == "":
		return fmt.Errorf("world of %d without %s, the address of rank 0: %w", c.World, EnvAddr, ErrConfig)
	case c.Port < 1 || c.Port > 65535:
		return fmt.Errorf("port %d: want 1-65535: %w", c.Port, ErrConfig)
	}
	return nil
}

// Group is this process's membership of a process group.
type Group struct {
	cfg  Config
	host string
	c    unsafe.Pointer
}

// Open joins the group cfg describes, waiting up to cfg.Timeout for every rank. The
// caller must Close it.
func Open(cfg Config) (*Group, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	if cfg.Timeout <= 0 {
		return nil, fmt.Errorf("timeout %v: want > 0: %w", cfg.Timeout, ErrConfig)
	}
	if !Available() {
		return nil, ErrUnavailable
	}
	host, _ := os.Hostname()
	g := &Group{cfg: cfg, host: host}
	local := ""
	if ip := net.ParseIP(cfg.Addr); (ip != nil && ip.IsLoopback()) || cfg.Addr == "localhost" {
		local = "127.0.0.1" // every rank is on this machine: bind where rank 0 listens
	}
	addr, iface, lh := C.CString(cfg.Addr), C.CString(cfg.Iface), C.CString(local)
	defer C.free(unsafe.Pointer(addr))
	defer C.free(unsafe.Pointer(iface))
	defer C.free(unsafe.Pointer(lh))
	attempt := -1 // rank 0 serves the store
	if cfg.Agent {
		attempt = cfg.Attempt
	}
	err := g.call("rendezvous", func() *C.char {
		return C.mempo_c10d_open(&g.c, addr, C.int(cfg.Port), C.int(cfg.Rank), C.int(cfg.World),
			C.int64_t(cfg.Timeout.Milliseconds()), iface, lh, C.int(attempt))
	})
	if err != nil {
		return nil, err
	}
	return g, nil
}

// Rank is this process's rank.
func (g *Group) Rank() int { return g.cfg.Rank }

// LocalRank is this process's rank among those on its machine.
func (g *Group) LocalRank() int { return g.cfg.LocalRank }

// World is the number of processes in the group.
func (g *Group) World() int { return g.cfg.World }

// AllReduce sums t, a dense contiguous tensor of the same shape and dtype on every rank,
// over the group, in place; every rank ends with the same sum.
func (g *Group) AllReduce(t torch.Raw) error {
	return g.call("all-reduce", func() *C.char { return C.mempo_c10d_allreduce(g.c, t.Pointer()) })
}

// Broadcast copies rank root's t into every rank's t, in place.
func (g *Group) Broadcast(t torch.Raw, root int) error {
	return g.call("broadcast", func() *C.char { return C.mempo_c10d_broadcast(g.c, t.Pointer(), C.int(root)) })
}

// Barrier returns once every rank has called it.
func (g *Group) Barrier() error {
	return g.call("barrier", func() *C.char { return C.mempo_c10d_barrier(g.c) })
}

// Close leaves the group.
func (g *Group) Close() {
	if g.c != nil {
		C.mempo_c10d_close(g.c)
		g.c = nil
	}
}

// call runs one C call, turning its message into an error that names what failed, this
// rank and host, and the timeout.
func (g *Group) call(what string, f func() *C.char) error {
	msg := f()
	if msg == nil {
		return nil
	}
	defer C.free(unsafe.Pointer(msg))
	return fmt.Errorf("%s: rank %d of %d on %s (rank 0 at %s:%d, timeout %v): %s: %w",
		what, g.cfg.Rank, g.cfg.World, g.host, g.cfg.Addr, g.cfg.Port, g.cfg.Timeout, C.GoString(msg), ErrFailed)
}
