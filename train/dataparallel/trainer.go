package dataparallel

import (
	"fmt"
	"log/slog"

	"github.com/mempo/mempo/model/qwen2"
	"github.com/mempo/mempo/train"
)

// Trainer runs one optimizer step of a training stage: its passes, under the whole
// step's divisor, where the stage's runtime puts them, then one AdamW step. The passes
// run in this process; across a local group of Procs processes, started at the first
// step on the model being trained; or, with Ranks, as this rank's share of a group of
// machines, whose gradients are summed before the step. The PPO update and SFT both
// train through it, so the three ways run the same step. A failed step leaves the
// gradients zeroed. Close ends a local group.
type Trainer struct {
	Procs   int              // processes on this machine, this one included
	Ranks   train.Collective // the ranks this process is one of; nil on one machine
	Options qwen2.Options    // what a local group's workers build their replicas with
	Log     *slog.Logger     // where a local group says it started

	group *Group
}

// NewTrainer is the trainer of a stage's runtime: its processes, its ranks and the
// options its policy loads with.
func NewTrainer(rt train.Runtime, log *slog.Logger) *Trainer {
	return &Trainer{Procs: rt.Procs, Ranks: train.Ranks(rt.WorldSize, rt.Group), Options: rt.Options(), Log: log}
}

// PPOResult is one mini-batch's figures: the objective's stats over its micro-batches,
// the optimizer step's, and the micro-batches it was cut into.
type PPOResult struct {
	train.Stats
	train.StepStats
	Micros int
}

// MicroError is the failure of one micro-batch's pass, which names it by its place in
// the mini-batch and by its first sequence's index in the mini-batch.
type MicroError struct {
	Micro, Micros int // 1-based, of
	First         int // the index of its first sequence in the mini-batch
	Err           error
}

func (e *MicroError) Error() string {
	return fmt.Sprintf("micro-batch %d of %d: %v", e.Micro, e.Micros, e.Err)
}

func (e *MicroError) Unwrap() error { return e.Err }

// PPO runs one mini-batch of the PPO update: cut into micro-batches of at most budget
// tokens (PPOStep.Cut), each one's forward and backward under the mini-batch's
// divisor (train.Divisor of the objective's aggregation), then one AdamW step.
func (t *Trainer) PPO(step train.PPOStep, adam *train.AdamW, batch []*train.Sequence, budget int) (PPOResult, error) {
	lengths := make([]int, len(batch))
	for i, s := range batch {
		lengths[i] = len(s.Response)
	}
	div, err := train.Divisor(step.Objective.Agg, lengths)
	if err != nil {
		return PPOResult{}, err
	}
	cut := step.Cut(batch, budget)
	micros := make([][]*train.Sequence, len(cut))
	for j, mi := range cut {
		micros[j] = pick(batch, mi)
	}
	res := PPOResult{Micros: len(micros)}
	run := func(j int) error {
		s, err := step.Micro(micros[j], div)
		if err != nil {
			return &MicroError{Micro: j + 1, Micros: len(micros), First: cut[j][0], Err: err}
		}
		res.Stats = res.Stats.Merge(s)
		return nil
	}
	switch {
	case t.Ranks != nil:
		err = t.rankShare(micros, adam, run)
		if err == nil {
			res.Stats, err = train.GatherStats(t.Ranks, res.Stats)
		}
	case t.Procs > 1:
		if err = t.start(func(cfg Config) (*Group, error) { return StartPPO(step, cfg) }); err == nil {
			if res.Stats, err = t.group.Micros(micros, div); err != nil {
				err = fmt.Errorf("%d micro-batches across %d processes: %w", len(micros), t.Procs, err)
			}
		}
	default:
		for j := range micros {
			if err = run(j); err != nil {
				break
			}
		}
	}
	if res.StepStats, err = stepAdam(adam, err); err != nil {
		return PPOResult{}, err
	}
	return res, nil
}

// rankShare runs this rank's micro-batches of a mini-batch, dealt among the ranks by
// tokens as a local group deals them, and sums the gradients across the ranks.
func (t *Trainer) rankShare(micros [][]*train.Sequence, adam *train.AdamW, run func(j int) error) error {
	for _, j := range Split(microCosts(micros), t.Ranks.World())[t.Ranks.Rank()] {
		if err := run(j); err != nil {
			return fmt.Errorf("rank %d: %w", t.Ranks.Rank(), err)
		}
	}
	return adam.ReduceGrads(t.Ranks)
}

// NLL runs one batch of SFT, the mean NLL of its response tokens (train.NLLStep),
// then one AdamW step. It returns the batch's loss and response tokens.
func (t *Trainer) NLL(step train.NLLStep, adam *train.AdamW, batch []qwen2.Pair) (loss float64, tokens int, ss train.StepStats, err error) {
	switch {
	case t.Ranks != nil:
		loss, tokens, err = t.rankNLL(step, adam, batch)
	case t.Procs > 1:
		if err = t.start(func(cfg Config) (*Group, error) { return StartNLL(step, cfg) }); err == nil {
			loss, tokens, err = t.group.Backward(batch)
		}
	default:
		loss, tokens, err = step.Backward(batch)
	}
	if ss, err = stepAdam(adam, err); err != nil {
		return 0, 0, ss, err
	}
	return loss, tokens, ss, nil
}

// rankNLL runs this rank's share of a batch, dealt among the ranks by tokens as a local
// group deals it, under the whole batch's totals, and sums the gradients, losses and
// tokens across the ranks.
func (t *Trainer) rankNLL(step train.NLLStep, adam *train.AdamW, batch []qwen2.Pair) (float64, int, error) {
	c := t.Ranks
	part := pick(batch, Split(pairCosts(batch), c.World())[c.Rank()])
	loss, tokens, err := step.BackwardPart(part, step.Totals(batch))
	if err != nil {
		return 0, 0, fmt.Errorf("rank %d: %w", c.Rank(), err)
	}
	if err := adam.ReduceGrads(c); err != nil {
		return 0, 0, err
	}
	rows, err := train.GatherFloats(c, []float64{loss, float64(tokens)})
	if err != nil {
		return 0, 0, err
	}
	loss, tokens = 0, 0
	for _, r := range rows {
		loss += r[0]
		tokens += int(r[1])
	}
	return loss, tokens, nil
}

// start starts the local group at the first step.
func (t *Trainer) start(group func(Config) (*Group, error)) error {
	if t.group != nil {
		return nil
	}
	g, err := group(Config{Procs: t.Procs, Options: t.Options, Log: t.Log})
	if err != nil {
		return err
	}
	t.group = g
	return nil
}

// stepAdam ends a step whose passes returned passErr: the optimizer step, then the
// gradients cleared for the next; after a failed pass, only the clearing.
func stepAdam(adam *train.AdamW, passErr error) (train.StepStats, error) {
	if passErr != nil {
		adam.ZeroGrad()
		return train.StepStats{}, passErr
	}
	ss, err := adam.Step()
	if zerr := adam.ZeroGrad(); err == nil {
		err = zerr
	}
	return ss, err
}

// Close ends the local group's processes, if any.
func (t *Trainer) Close() {
	if t.group != nil {
		t.group.Close()
		t.group = nil
	}
}
