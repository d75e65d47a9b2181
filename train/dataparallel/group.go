// Package dataparallel trains one model with several processes on one machine, as
// PyTorch's DistributedDataParallel does with one process per core: each step's work
// (SFT's batch, the PPO update's micro-batches) is dealt into shares of about equal
// tokens, each process runs the forward and backward passes of its share on its own
// copy of the model, and the leader, the training process itself, adds the workers'
// gradients into its own before its optimizer step.
// Only the leader's weights are updated, and they reach the workers through shared
// memory before each step, so a worker holds no optimizer state and a resumed run
// needs nothing from it. Each share is scored with the whole batch's divisors
// (train.NLLStep.BackwardPart; the mini-batch's for train.PPOStep.Micro), so the
// gradients equal one process's to float rounding.
//
// Why processes and not threads: at a small model's width two processes of one thread
// outrun one process of two (the tiny preset's SFT: README), and processes share no
// libtorch state (libtorch 2.1.2's bfloat16 products crashed when two threads of one
// process ran them at once; README, known issues).
//
// A worker is the leader's own executable started again, which must call ServeWorker
// first thing in main.
//
// Trainer is what the training stages call: one optimizer step's passes, in this
// process, across such a group, or as one rank of several machines, then AdamW.
package dataparallel

import (
	"bufio"
	"encoding/gob"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/mempo/mempo/model/qwen2"
	"github.com/mempo/mempo/model/torch"
	"github.com/mempo/mempo/train"
)

// ErrWorker marks a worker that could not start or failed.
var ErrWorker = errors.New("data-parallel worker failed")

// greetWithin is how long a started worker has to greet its leader.
const greetWithin = 30 * time.Second

// Config says how to start a group.
type Config struct {
	Procs   int           // processes in all, the leader included
	Threads int           // libtorch threads of each worker; 0: the leader's count
	Options qwen2.Options // what the workers build their replicas with: the leader's load options
	Stderr  io.Writer     // the workers' standard error; nil: the leader's
	Log     *slog.Logger  // where the group says it started; nil: nowhere
}

// Group is the leader's side of the processes that train one model: the workers it
// started and the memory it shares with them.
type Group struct {
	model   *qwen2.Model   // the leader's
	nll     *train.NLLStep // the step it runs, on the leader's model: one of these
	ppo     *train.PPOStep
	params  []train.Param
	handles []torch.Raw
	layout  layout
	mem     *mapping
	weights views   // region 0
	grads   []views // worker k's region k, at k-1
	workers []*worker
	failed  error // a worker failed: the group cannot go on
}

type worker struct {
	rank int
	cmd  *exec.Cmd
	in   io.WriteCloser
	enc  *gob.Encoder
	dec  *gob.Decoder
}

// StartNLL starts cfg.Procs−1 workers beside the leader to run the supervised step
// (Backward), whose model is the leader's, on the CPU. The caller must Close the group.
func StartNLL(step train.NLLStep, cfg Config) (*Group, error) {
	return start(&Group{model: step.Model, nll: &step}, setup{NLL: nllOf(step)}, cfg)
}

// StartPPO starts cfg.Procs−1 workers beside the leader to run the PPO update's
// micro-batches (Micros), whose model is the leader's, on the CPU. The caller must
// Close the group.
func StartPPO(step train.PPOStep, cfg Config) (*Group, error) {
	return start(&Group{model: step.Model, ppo: &step}, setup{PPO: ppoOf(step)}, cfg)
}

// start starts g's workers, each set up as s with its rank.
func start(g *Group, s setup, cfg Config) (_ *Group, err error) {
	if cfg.Procs < 2 {
		return nil, fmt.Errorf("data parallel: %d processes, want at least 2", cfg.Procs)
	}
	if dev := g.model.Device(); dev.IsCuda() {
		return nil, fmt.Errorf("data parallel: the model is on %v; several processes train on the CPU only", dev)
	}
	if s.Config, err = json.Marshal(g.model.Config); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			g.Close()
		}
	}()
	for _, w := range g.model.Weights() {
		g.params = append(g.params, train.Param{Name: w.Key, T: w.Tensor})
	}
	g.handles = handles(g.params)
	g.layout = layoutOf(g.params)
	if g.mem, err = create(int64(cfg.Procs) * g.layout.Size); err != nil {
		return nil, err
	}
	if g.weights, err = g.mem.views(g.layout, 0); err != nil {
		return nil, err
	}
	s.Threads, s.Options, s.Layout = cfg.Threads, cfg.Options, g.layout
	if s.Threads <= 0 {
		s.Threads = torch.NumThreads()
	}
	for rank := 1; rank < cfg.Procs; rank++ {
		v, err := g.mem.views(g.layout, rank)
		if err != nil {
			return nil, err
		}
		g.grads = append(g.grads, v)
		w, err := g.start(rank, cfg.Stderr)
		if err != nil {
			return nil, err
		}
		s.Rank = rank
		if err := w.enc.Encode(s); err != nil {
			return nil, w.fail(err)
		}
	}
	for _, w := range g.workers {
		var r ready
		if err := w.dec.Decode(&r); err != nil {
			return nil, w.fail(err)
		}
		if r.Err != "" {
			return nil, fmt.Errorf("worker %d: %s: %w", w.rank, r.Err, ErrWorker)
		}
	}
	if cfg.Log != nil {
		pids := make([]int, len(g.workers))
		for i, w := range g.workers {
			pids[i] = w.cmd.Process.Pid
		}
		cfg.Log.Info("data parallel", "procs", cfg.Procs, "threads", s.Threads, "workers", pids, "shared_bytes", len(g.mem.mem))
	}
	return g, nil
}

// start starts worker rank and waits for its greeting.
func (g *Group) start(rank int, stderr io.Writer) (*worker, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("data parallel: %w", err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d", envWorker, rank))
	cmd.ExtraFiles = []*os.File{g.mem.file}
	// A group of its own: a terminal's Ctrl-C reaches the leader alone, which ends its
	// step and then its workers, rather than the workers dying under the step.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Stderr = stderr
	if stderr == nil {
		cmd.Stderr = os.Stderr
	}
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("data parallel: start worker %d: %w", rank, err)
	}
	w := &worker{rank: rank, cmd: cmd, in: in, enc: gob.NewEncoder(in), dec: gob.NewDecoder(bufio.NewReader(out))}
	g.workers = append(g.workers, w)
	// A child that does not serve (an executable without ServeWorker) prints something
	// else or nothing; it is killed after a while, which ends the read.
	timer := time.AfterFunc(greetWithin, func() { cmd.Process.Kill() })
	defer timer.Stop()
	var h hello
	if err := w.dec.Decode(&h); err != nil {
		return nil, fmt.Errorf("%w (does %s call dataparallel.ServeWorker first thing in main?)", w.fail(err), exe)
	}
	return w, nil
}

// fail kills the worker after err broke its conversation, and says how it ended.
func (w *worker) fail(err error) error {
	w.cmd.Process.Kill()
	w.in.Close()
	w.cmd.Wait()
	return fmt.Errorf("worker %d (pid %d, %v): %v: %w", w.rank, w.cmd.Process.Pid, w.cmd.ProcessState, err, ErrWorker)
}

// Backward runs one batch of the supervised step across the group, as
// train.NLLStep.Backward runs it in one process: the batch is dealt into shares of
// about equal tokens (split), the leader's first, and every process runs its share
// with the whole batch's totals. It returns the batch's loss and response tokens.
func (g *Group) Backward(batch []qwen2.Pair) (loss float64, tokens int, err error) {
	if g.nll == nil {
		return 0, 0, fmt.Errorf("data parallel: Backward on a group started for the PPO update")
	}
	whole := g.nll.Totals(batch)
	shares := Split(pairCosts(batch), len(g.workers)+1)
	jobs := make([]*work, len(g.workers))
	for k := range jobs {
		if len(shares[k+1]) > 0 {
			jobs[k] = &work{Pairs: pick(batch, shares[k+1]), Whole: whole}
		}
	}
	err = g.round(jobs, func() error {
		var err error
		loss, tokens, err = g.nll.BackwardPart(pick(batch, shares[0]), whole)
		return err
	}, func(d done) {
		loss += d.Loss
		tokens += d.Tokens
	})
	if err != nil {
		return 0, 0, err
	}
	return loss, tokens, nil
}

// Micros runs the micro-batches of one mini-batch of the PPO update across the group,
// as train.PPOStep.Micro runs each in turn in one process: they are dealt into shares
// of about equal tokens (split), the leader's first, and every process runs its
// micro-batches under divisor, the mini-batch's. It returns their merged stats.
func (g *Group) Micros(micros [][]*train.Sequence, divisor float64) (st train.Stats, err error) {
	if g.ppo == nil {
		return st, fmt.Errorf("data parallel: Micros on a group started for SFT")
	}
	shares := Split(microCosts(micros), len(g.workers)+1)
	jobs := make([]*work, len(g.workers))
	for k := range jobs {
		if len(shares[k+1]) == 0 {
			continue
		}
		w := &work{Divisor: divisor}
		for _, j := range shares[k+1] {
			mi := make([]train.Sequence, len(micros[j]))
			for i, s := range micros[j] {
				mi[i] = *s
			}
			w.Micros = append(w.Micros, mi)
		}
		jobs[k] = w
	}
	err = g.round(jobs, func() error {
		for _, j := range shares[0] {
			s, err := g.ppo.Micro(micros[j], divisor)
			if err != nil {
				return fmt.Errorf("micro-batch %d of %d: %w", j+1, len(micros), err)
			}
			st = st.Merge(s)
		}
		return nil
	}, func(d done) { st = st.Merge(d.Stats) })
	return st, err
}

// round runs one step across the group: the leader's weights to the shared region,
// jobs[k] to worker k+1 (none to a worker whose job is nil), own on the leader, then
// every busy worker's answer to merge in rank order, and the workers' gradients added
// into the leader's parameters' gradients, in rank order.
func (g *Group) round(jobs []*work, own func() error, merge func(done)) error {
	if g.failed != nil {
		return g.failed
	}
	if err := g.publish(); err != nil {
		return err
	}
	var busy []int // ranks with a job, in order
	for k, w := range g.workers {
		if jobs[k] == nil {
			continue
		}
		if err := w.enc.Encode(jobs[k]); err != nil {
			g.failed = w.fail(err)
			return g.failed
		}
		busy = append(busy, k+1)
	}
	err := own()
	// Every busy worker answers, whatever the leader's share did.
	for _, rank := range busy {
		w := g.workers[rank-1]
		var d done
		if derr := w.dec.Decode(&d); derr != nil {
			g.failed = w.fail(derr)
			return g.failed
		}
		if d.Err != "" && err == nil {
			err = fmt.Errorf("worker %d: %s", w.rank, d.Err)
		}
		merge(d)
	}
	if err != nil {
		return err
	}
	return g.gather(busy)
}

// publish copies the leader's weights into the shared weights region.
func (g *Group) publish() (err error) {
	torch.DoNoGrad(func() {
		defer torch.Catch("share the weights", &err)
		for i, p := range g.params {
			g.weights.params[i].CopyFrom(torch.Of(p.T))
		}
	})
	return err
}

// gather adds the gradients of the workers of the given ranks into the leader's, in
// rank order. A parameter the leader's share left without a gradient gets a copy of
// the first worker's.
func (g *Group) gather(ranks []int) (err error) {
	torch.DoNoGrad(func() {
		defer torch.Catch("add the workers' gradients", &err)
		for _, rank := range ranks {
			v := g.grads[rank-1]
			for i, h := range g.handles {
				if defined, _ := h.GradIs(torch.None); !defined {
					c := torch.RawZeros(v.params[i].Size(), v.params[i].DType(), g.model.Device())
					c.CopyFrom(v.params[i])
					h.AttachGrad(c)
					c.Free()
					continue
				}
				grad := h.Grad()
				grad.Add_(v.params[i])
				grad.Free()
			}
		}
	})
	return err
}

// Close ends the workers (their input closes and they exit; one that has not exited
// within a few seconds is killed) and frees the shared memory.
func (g *Group) Close() {
	for _, w := range g.workers {
		w.in.Close()
	}
	for _, w := range g.workers {
		timer := time.AfterFunc(5*time.Second, func() { w.cmd.Process.Kill() })
		w.cmd.Wait()
		timer.Stop()
	}
	g.workers = nil
	for _, v := range g.grads {
		v.free()
	}
	g.weights.free()
	torch.Free(g.handles...)
	g.handles = nil
	if g.mem != nil {
		g.mem.close()
	}
}
