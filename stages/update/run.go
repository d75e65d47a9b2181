package update

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"time"

	"github.com/mempo/mempo/format"
	"github.com/mempo/mempo/jobs"
	"github.com/mempo/mempo/model/qwen2"
	"github.com/mempo/mempo/model/torch"
	"github.com/mempo/mempo/train"
	"github.com/mempo/mempo/train/dataparallel"
)

// Inputs are the checkpoints and datasets the update reads.
type Inputs struct {
	Policy     string // checkpoint to train (its optimizer state, if any, continues)
	Ref        string // frozen reference checkpoint: same architecture and vocabulary
	Rollouts   string // rollouts dataset
	Logprobs   string // logprobs dataset of those rollouts
	Advantages string // advantages dataset of those rollouts
}

// Metric is one line of _metrics.jsonl: one mini-batch, one optimizer step. The loss
// figures are the mini-batch's values (micro-batch shares added up); Tokens counts its
// response tokens.
type Metric struct {
	Step      int64 `json:"step"`
	Epoch     int   `json:"epoch"`
	MiniBatch int   `json:"mini_batch"`
	train.Stats
	GradNorm   float64 `json:"grad_norm"`
	LR         float64 `json:"lr"`
	Seqs       int     `json:"seqs"`
	Micro      int     `json:"micro_batches"`
	Seconds    float64 `json:"seconds"`
	TokensPerS float64 `json:"tokens_per_s"`
}

// Size is the mini-batch's sequences and response tokens, for the progress display.
func (m Metric) Size() (seqs, tokens int) { return m.Seqs, m.Tokens }

// planStream separates the data shuffle's PCG stream from other uses of the seed.
const planStream = 0x7570646174652d31 // "update-1"

// Run trains in.Policy into the checkpoint spec.Out (DESIGN.md §7) with the training
// loop update and SFT share (train.Loop). The checkpoint is keyed by the policy and
// reference commit records, the three datasets, cfg and the seed: a rerun with the same
// key is a cache hit. Work happens in a temp dir beside spec.Out with a resumable
// snapshot after every mini-batch unless opt says otherwise (train.WithSnapshotEvery);
// a failed or killed run publishes nothing and leaves an earlier checkpoint at spec.Out
// in place, and a rerun resumes from the last snapshot with the same result.
func Run(ctx context.Context, cfg Config, in Inputs, spec jobs.Spec, opt ...train.Option) (*train.Result, error) {
	torch.BoundHeap()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	spec = spec.WithDefaults()
	if err := checkReference(in.Policy, in.Ref); err != nil {
		return nil, err
	}
	inputs, err := keyedInputs(in)
	if err != nil {
		return nil, err
	}
	if err := scoredAgainst(in.Logprobs, inputs); err != nil {
		return nil, err
	}
	r := &run{cfg: cfg, in: in, seed: spec.Seed, now: spec.Now, log: spec.Log,
		trainer: dataparallel.NewTrainer(cfg.Runtime, spec.Log)}
	loop := train.Loop[Metric]{
		Stage: Stage, Unit: "mini-batch", Units: "mini-batches",
		Config: cfg, Inputs: inputs, From: in.Policy, Spec: spec,
		Model: cfg.Options(), AdamW: cfg.AdamW,
		Continue: true, Group: train.Ranks(cfg.WorldSize, cfg.Group),
		Prepare: r.prepare, Step: r.step, Memory: r.memory, BatchFlag: "--micro-token-budget",
		Finish: func(_ *qwen2.Model, _ map[string]float64, mets []Metric) (map[string]float64, error) {
			return summary(mets), nil
		},
	}
	defer r.trainer.Close()
	res, err := loop.Run(ctx, append([]train.Option{train.WithSnapshotEvery(1)}, opt...)...)
	if err != nil || res.Hit || res.State == nil { // no State: a rank that wrote nothing
		return res, err
	}
	fmt.Fprintf(spec.Stdout, "update: wrote %s (%d mini-batches, %d resumed, step %d, pg_loss %.4g, kl %.4g)\n",
		spec.Out, len(r.plan), res.Resumed, res.State.Step, res.State.Metrics["pg_loss"], res.State.Metrics["kl"])
	return res, nil
}

// run holds one update's data: the samples and their plan, read after a cache miss.
type run struct {
	cfg     Config
	in      Inputs
	seed    int64
	now     func() time.Time
	log     *slog.Logger
	samples []Sample
	plan    []Batch
	model   qwen2.Config // the policy's, in the dtype it trains in
	trainer *dataparallel.Trainer
}

// prepare joins the three datasets into samples, checks each fits the policy, and
// shuffles them into the plan of mini-batches.
func (r *run) prepare(context.Context) (train.Plan, error) {
	if err := sameTemperature(r.in.Logprobs, r.cfg.Temperature); err != nil {
		return train.Plan{}, err
	}
	var err error
	if r.samples, err = LoadSamples(r.in.Rollouts, r.in.Logprobs, r.in.Advantages, r.cfg.Objective.KLCoef != 0); err != nil {
		return train.Plan{}, err
	}
	mc, err := qwen2.ReadConfig(filepath.Join(r.in.Policy, qwen2.ConfigFile))
	if err != nil {
		return train.Plan{}, fmt.Errorf("policy: %w", err)
	}
	if err := fits(mc, r.samples); err != nil {
		return train.Plan{}, err
	}
	r.model = mc
	if r.cfg.DType != "" {
		r.model.TorchDType = r.cfg.DType
	}
	pcg := rand.NewPCG(uint64(r.seed), planStream)
	if r.plan, err = Plan(len(r.samples), r.cfg.PPOEpochs, r.cfg.MiniBatches, rand.New(pcg)); err != nil {
		return train.Plan{}, err
	}
	rng, _ := pcg.MarshalBinary()
	p := train.Plan{Epochs: r.cfg.PPOEpochs, RNG: rng}
	for _, b := range r.plan {
		p.Epoch = append(p.Epoch, b.Epoch)
	}
	return p, nil
}

// step runs step k of the plan, mini-batch plan[k], on the model being trained: its
// micro-batches and one AdamW step, where the config's runtime puts them (r.trainer).
func (r *run) step(k int, m *qwen2.Model, adam *train.AdamW) (Metric, error) {
	start := r.now()
	b := r.plan[k]
	res, err := r.trainer.PPO(r.ppo(m), adam, r.batch(b), r.cfg.MicroTokenBudget)
	if me := (*dataparallel.MicroError)(nil); errors.As(err, &me) {
		first := r.samples[b.Samples[me.First]]
		return Metric{}, fmt.Errorf("first sample uid %s sample %d turn %d: %w", first.UID, first.Sample, first.Turn, err)
	}
	if err != nil {
		return Metric{}, err
	}
	sec := r.now().Sub(start).Seconds()
	met := Metric{Step: adam.Steps(), Epoch: b.Epoch, MiniBatch: b.Index, Stats: res.Stats,
		GradNorm: res.GradNorm, LR: res.LR, Seqs: len(b.Samples), Micro: res.Micros, Seconds: sec}
	if sec > 0 {
		met.TokensPerS = float64(res.Tokens) / sec
	}
	return met, nil
}

// batch is mini-batch b's sequences, in its order.
func (r *run) batch(b Batch) []*train.Sequence {
	seqs := make([]*train.Sequence, len(b.Samples))
	for i, s := range b.Samples {
		seqs[i] = &r.samples[s].Sequence
	}
	return seqs
}

// ppo is the PPO step on m with the config's objective and pass settings.
func (r *run) ppo(m *qwen2.Model) train.PPOStep {
	return train.PPOStep{Model: m, Objective: r.cfg.Objective, Chunk: r.cfg.Chunk, Temperature: r.cfg.Temperature,
		GradCheckpoint: r.cfg.GradCheckpoint, SharePrefixes: r.cfg.SharePrefixes}
}

// memory estimates the peak memory of the plan: its largest micro-batch, as the
// trainer cuts the mini-batches.
func (r *run) memory() (train.Memory, error) {
	var passes []train.Pass
	ppo := r.ppo(nil)
	for _, b := range r.plan {
		seqs := r.batch(b)
		for _, mi := range ppo.Cut(seqs, r.cfg.MicroTokenBudget) {
			micro := make([]*train.Sequence, len(mi))
			for k, i := range mi {
				micro[k] = seqs[i]
			}
			passes = append(passes, ppo.Pass(micro))
		}
	}
	s := train.Shape{Entropy: true, Chunk: r.cfg.Chunk, GradCheckpoint: r.cfg.GradCheckpoint, CUDA: strings.HasPrefix(r.cfg.Device, "cuda"), Attention: r.cfg.Attention}
	m := train.PlanMemory(r.model, s, passes)
	m.Replicas = train.ReplicaMemory(m, r.cfg.Procs)
	return m, nil
}

// fits checks that every sample is within the model's context and vocabulary, naming
// the first that is not.
func fits(c qwen2.Config, samples []Sample) error {
	for i := range samples {
		s := &samples[i]
		if n := s.Len(); n > c.MaxPositions {
			return fmt.Errorf("uid %s sample %d turn %d: %d tokens exceed the policy's max_position_embeddings %d: sequence longer than the model's context: %w",
				s.UID, s.Sample, s.Turn, n, c.MaxPositions, ErrInput)
		}
		for _, ids := range [][]int64{s.Context, s.Response} {
			for _, id := range ids {
				if id < 0 || id >= int64(c.VocabSize) {
					return fmt.Errorf("uid %s sample %d turn %d: token %d outside the policy's vocabulary [0, %d): rollouts of another tokenizer?: %w",
						s.UID, s.Sample, s.Turn, id, c.VocabSize, ErrInput)
				}
			}
		}
	}
	return nil
}

// summary is trainer_state.json's metrics: the mean of each figure over the
// mini-batches, the last LR, total tokens and the overall tokens/s.
func summary(mets []Metric) map[string]float64 {
	out := map[string]float64{"mini_batches": float64(len(mets))}
	if len(mets) == 0 {
		return out
	}
	var tokens float64
	for _, m := range mets {
		for k, v := range map[string]float64{
			"pg_loss": m.Loss, "pg_clipfrac": m.ClipFrac, "pg_clipfrac_lower": m.ClipFracLow, "ppo_kl": m.PPOKL,
			"kl": m.KL, "entropy": m.Entropy, "loss": m.Total, "grad_norm": m.GradNorm,
		} {
			out[k] += v / float64(len(mets))
		}
		tokens += float64(m.Tokens)
	}
	out["lr"] = mets[len(mets)-1].LR
	out["tokens"] = tokens
	// tokens/s stays in _metrics.jsonl: trainer_state.json is content, timings are not.
	return out
}

// keyedInputs names every input by digest, for the cache key and the commit record: the
// checkpoints by their commit records, the datasets by their manifests.
func keyedInputs(in Inputs) ([]format.Input, error) {
	var out []format.Input
	for _, d := range []struct {
		name, dir string
		dataset   bool
	}{
		{"policy", in.Policy, false}, {"ref", in.Ref, false},
		{"rollouts", in.Rollouts, true}, {"logprobs", in.Logprobs, true}, {"advantages", in.Advantages, true},
	} {
		var i format.Input
		var err error
		if d.dataset {
			i, err = jobs.DatasetInput(d.name, d.dir)
		} else {
			i, err = jobs.CheckpointInput(d.name, d.dir)
		}
		if err != nil {
			return nil, fmt.Errorf("update: %w", err)
		}
		out = append(out, i)
	}
	return out, nil
}
