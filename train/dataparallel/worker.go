package dataparallel

import (
	"bufio"
	"encoding/gob"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/mempo/mempo/model/qwen2"
	"github.com/mempo/mempo/model/torch"
	"github.com/mempo/mempo/train"
)

// envWorker is set in the environment of the processes a leader starts; it holds the
// worker's rank.
const envWorker = "MEMPO_DATAPARALLEL_WORKER"

// sharedFD is the descriptor of the group's memory file in a worker: the first of
// exec.Cmd.ExtraFiles.
const sharedFD = 3

// ServeWorker makes this process a worker when a leader started it (its environment
// says so): it builds its replica, serves steps until the leader closes its input,
// and exits the process. Otherwise it returns at once. A binary that trains with
// several processes calls it first thing in main, before anything writes to standard
// output, which carries the worker's replies; a test binary calls it in TestMain.
func ServeWorker() {
	rank := os.Getenv(envWorker)
	if rank == "" {
		return
	}
	if err := serve(os.Stdin, os.Stdout, os.NewFile(sharedFD, "shared memory")); err != nil {
		fmt.Fprintf(os.Stderr, "data-parallel worker %s: %v\n", rank, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// serve greets the leader on out, builds the replica setup describes, and answers
// every work message from in until in ends.
func serve(in io.Reader, out io.Writer, shared *os.File) error {
	enc, dec := gob.NewEncoder(out), gob.NewDecoder(bufio.NewReader(in))
	if err := enc.Encode(hello{PID: os.Getpid()}); err != nil {
		return err
	}
	var s setup
	if err := dec.Decode(&s); err != nil {
		return fmt.Errorf("read setup: %w", err)
	}
	r, err := newReplica(s, shared)
	if err := enc.Encode(ready{Err: message(err)}); err != nil {
		return err
	}
	if err != nil {
		return err
	}
	defer r.drop()
	for {
		var w work
		if err := dec.Decode(&w); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return fmt.Errorf("read work: %w", err)
		}
		if err := enc.Encode(r.run(w)); err != nil {
			return err
		}
	}
}

func message(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// replica is a worker's copy of the model, its weights refreshed from the shared
// weights region before each step and its gradients accumulated into its own region.
type replica struct {
	m       *qwen2.Model
	nll     *train.NLLStep // the step it runs: one of these
	ppo     *train.PPOStep
	params  []train.Param
	handles []torch.Raw
	mem     *mapping
	weights views // region 0, the leader's weights
	grads   views // region Rank
}

// newReplica builds the model setup describes (its weights uninitialised until the
// first step loads the leader's) over the shared memory file.
func newReplica(s setup, shared *os.File) (r *replica, err error) {
	torch.BoundHeap()
	if err := torch.SetNumThreads(max(s.Threads, 1)); err != nil {
		return nil, err
	}
	cfg, err := qwen2.ParseConfig(s.Config)
	if err != nil {
		return nil, err
	}
	r = &replica{}
	defer func() {
		if err != nil {
			r.drop()
		}
	}()
	if r.m, err = qwen2.New(cfg, s.Options); err != nil {
		return nil, err
	}
	if r.params, err = train.Trainable(r.m); err != nil {
		return nil, err
	}
	if err := s.Layout.check(r.params); err != nil {
		return nil, err
	}
	r.handles = handles(r.params)
	if r.mem, err = attach(shared); err != nil {
		return nil, err
	}
	if have, want := int64(len(r.mem.mem)), int64(s.Rank+1)*s.Layout.Size; s.Rank < 1 || have < want {
		return nil, fmt.Errorf("rank %d: shared memory of %d bytes, want %d", s.Rank, have, want)
	}
	if r.weights, err = r.mem.views(s.Layout, 0); err != nil {
		return nil, err
	}
	if r.grads, err = r.mem.views(s.Layout, s.Rank); err != nil {
		return nil, err
	}
	switch {
	case s.NLL != nil:
		step := s.NLL.on(r.m)
		r.nll = &step
	case s.PPO != nil:
		step := s.PPO.on(r.m)
		r.ppo = &step
	default:
		return nil, fmt.Errorf("setup names no step")
	}
	return r, nil
}

func (r *replica) drop() {
	r.weights.free()
	r.grads.free()
	torch.Free(r.handles...)
	if r.m != nil {
		r.m.Drop()
	}
	if r.mem != nil {
		r.mem.close()
	}
}

// run runs one share: the leader's weights in, the forward and backward passes, the
// gradients left in the region.
func (r *replica) run(w work) done {
	start := time.Now()
	if err := r.load(); err != nil {
		return done{Err: err.Error()}
	}
	var d done
	var err error
	if r.nll != nil {
		d.Loss, d.Tokens, err = r.nll.BackwardPart(w.Pairs, w.Whole)
	} else {
		d.Stats, err = micros(*r.ppo, w.Micros, w.Divisor)
	}
	if err == nil {
		err = r.keep()
	}
	if err != nil {
		return done{Err: err.Error()}
	}
	d.Seconds = time.Since(start).Seconds()
	return d
}

// micros runs micro-batches of one mini-batch in order, its stats merged.
func micros(step train.PPOStep, micros [][]train.Sequence, divisor float64) (st train.Stats, err error) {
	for j, mi := range micros {
		batch := make([]*train.Sequence, len(mi))
		for i := range mi {
			batch[i] = &mi[i]
		}
		s, err := step.Micro(batch, divisor)
		if err != nil {
			return st, fmt.Errorf("micro-batch %d of %d of its share: %w", j+1, len(micros), err)
		}
		st = st.Merge(s)
	}
	return st, nil
}

// load copies the leader's weights into the replica and zeroes the gradient region,
// lent to the parameters as their gradients, so the backward pass adds into it.
func (r *replica) load() (err error) {
	torch.DoNoGrad(func() {
		defer torch.Catch("load the leader's weights", &err)
		for i, p := range r.params {
			torch.Of(p.T).CopyFrom(r.weights.params[i])
		}
		r.grads.flat.Zero_()
		for i, h := range r.handles {
			if _, same := h.GradIs(r.grads.params[i]); !same {
				h.AttachGrad(r.grads.params[i])
			}
		}
	})
	return err
}

// keep copies into the region each gradient the backward pass did not accumulate in
// place (train.AdoptGrad).
func (r *replica) keep() (err error) {
	torch.Do(func() {
		defer torch.Catch("keep the gradients", &err)
		for i, h := range r.handles {
			train.AdoptGrad(h, r.grads.params[i])
		}
	})
	return err
}
