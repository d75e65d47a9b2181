package train

import (
	"fmt"

	"github.com/sugarme/gotch"

	"github.com/mempo/mempo/model/torch"
)

// Collective is the process group of a run trained by several ranks at once, each a
// process of the same command on its own share of every step (train/collective's
// Group, over libtorch's c10d): DistributedDataParallel's scheme. Every rank holds the
// whole model and optimizer; once a step's passes are done the ranks sum their
// gradients (AdamW.ReduceGrads) and take the same AdamW step, so their weights stay
// equal. Rank 0 alone writes snapshots and the checkpoint (Loop.Group).
type Collective interface {
	Rank() int
	World() int
	// AllReduce sums t over the ranks, in place.
	AllReduce(t torch.Raw) error
	// Broadcast copies rank root's t into every rank's, in place.
	Broadcast(t torch.Raw, root int) error
}

// ReduceGrads sums every rank's gradients into each rank's: each group's flat gradient
// buffer in one all-reduce, after gradients libtorch allocated outside it are adopted.
func (o *AdamW) ReduceGrads(c Collective) (err error) {
	torch.Do(func() {
		defer torch.Catch("adamw reduce gradients", &err)
		o.adoptGrads()
		for _, g := range o.groups {
			if err = c.AllReduce(g.grad); err != nil {
				return
			}
		}
	})
	return err
}

// BroadcastState makes every rank's weights and optimizer state rank 0's: the
// parameters, each group's moments and master weights, and the step counts, so ranks
// that loaded their start from different places (rank 0 a snapshot, the others the
// checkpoint) train on from the same state.
func (o *AdamW) BroadcastState(c Collective) (err error) {
	torch.Do(func() {
		defer torch.Catch("adamw broadcast state", &err)
		for _, h := range o.handles {
			if err = c.Broadcast(h, 0); err != nil {
				return
			}
		}
		for _, g := range o.groups {
			for _, b := range []torch.Raw{g.expAvg, g.expAvgSq, g.master} {
				if b == (torch.Raw{}) {
					continue
				}
				if err = c.Broadcast(b, 0); err != nil {
					return
				}
			}
		}
		steps := make([]int64, 1+len(o.slots))
		steps[0] = o.steps
		for i, s := range o.slots {
			steps[i+1] = s.step
		}
		if steps, err = ShareInts(c, steps); err != nil {
			return
		}
		o.steps = steps[0]
		for i := range o.slots {
			o.slots[i].step = steps[i+1]
		}
	})
	return err
}

// ShareInts returns rank 0's vals on every rank (each rank passes as many).
func ShareInts(c Collective, vals []int64) ([]int64, error) {
	if len(vals) == 0 {
		return nil, nil
	}
	t := torch.RawFromHost(vals, []int64{int64(len(vals))}, gotch.CPU)
	defer t.Free()
	if err := c.Broadcast(t, 0); err != nil {
		return nil, err
	}
	return torch.ToHost[int64](t), nil
}

// GatherFloats returns every rank's row, by rank, on every rank; each rank passes a row
// of the same length. The rows travel as one all-reduce of a table that is zero but for
// each rank's own row, so they arrive exactly.
func GatherFloats(c Collective, row []float64) ([][]float64, error) {
	n, world := len(row), c.World()
	table := make([]float64, n*world)
	copy(table[c.Rank()*n:], row)
	t := torch.RawFromHost(table, []int64{int64(len(table))}, gotch.CPU)
	defer t.Free()
	if err := c.AllReduce(t); err != nil {
		return nil, err
	}
	sum := torch.ToHost[float64](t)
	rows := make([][]float64, world)
	for r := range rows {
		rows[r] = sum[r*n : (r+1)*n]
	}
	return rows, nil
}

// GatherStats merges every rank's stats of one step, in rank order, on every rank.
func GatherStats(c Collective, s Stats) (Stats, error) {
	rows, err := GatherFloats(c, []float64{s.Loss, s.ClipFrac, s.ClipFracLow, s.PPOKL, float64(s.Tokens), s.KL, s.Entropy, s.Total})
	if err != nil {
		return Stats{}, err
	}
	var out Stats
	for _, r := range rows {
		out = out.Merge(Stats{PolicyStats: PolicyStats{Loss: r[0], ClipFrac: r[1], ClipFracLow: r[2], PPOKL: r[3], Tokens: int(r[4])},
			KL: r[5], Entropy: r[6], Total: r[7]})
	}
	return out, nil
}

// CheckRanks checks a training stage's --world-size against its --procs and the group
// the rendezvous formed, wrapping errors in class (the stage's ErrConfig).
func CheckRanks(world, procs int, c Collective, class error) error {
	switch {
	case world < 0:
		return fmt.Errorf("--world-size %d: want >= 1 (0: 1): %w", world, class)
	case world > 1 && procs > 1:
		return fmt.Errorf("--world-size %d with --procs %d: train with ranks a launcher starts or with local processes, not both: %w", world, procs, class)
	case world > 1 && c == nil:
		return fmt.Errorf("--world-size %d without a process group: %w", world, class)
	case c != nil && c.World() != max(world, 1):
		return fmt.Errorf("--world-size %d, but the rendezvous formed a group of %d ranks: %w", world, c.World(), class)
	}
	return nil
}

// Ranks is the group a stage configured for world ranks shares its work with: c when
// there are others, else nil.
func Ranks(world int, c Collective) Collective {
	if world > 1 {
		return c
	}
	return nil
}
