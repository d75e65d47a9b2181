package update

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"time"

	"github.com/mempo/mempo/format"
	"github.com/mempo/mempo/internal/renameio"
	"github.com/mempo/mempo/jobs"
	"github.com/mempo/mempo/model/qwen2"
	"github.com/mempo/mempo/train"
)

// Inputs are the checkpoints and datasets the update reads.
type Inputs struct {
	Policy     string // checkpoint to train (its optimizer.safetensors, if any, continues)
	Ref        string // frozen reference checkpoint: same architecture and vocabulary
	Rollouts   string // rollouts dataset
	Logprobs   string // logprobs dataset of those rollouts
	Advantages string // advantages dataset of those rollouts
}

// Result says what Run did.
type Result struct {
	Dir     string
	Key     jobs.Key
	Hit     bool // Dir already was this exact checkpoint
	Resumed int  // mini-batches taken from an interrupted run's snapshot
	State   *train.TrainerState
}

// Metric is one line of metrics.jsonl: one mini-batch, one optimizer step. The loss
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

// cursor is the resume state saved with every snapshot: mini-batches done and their
// metrics, so a resumed run reports what an uninterrupted one would.
type cursor struct {
	Done    int      `json:"done"`
	Metrics []Metric `json:"metrics"`
}

// maxShardBytes shards saved weights as HF does by default (5 GB).
const maxShardBytes = 5 << 30

// planStream separates the data shuffle's PCG stream from other uses of the seed.
const planStream = 0x7570646174652d31 // "update-1"

// Run trains in.Policy into the checkpoint spec.Out (DESIGN.md §7). The checkpoint is
// keyed by the policy and reference digests, the three datasets, cfg and the seed: a
// rerun with the same key is a cache hit. Work happens in a temp dir beside spec.Out
// with a resumable snapshot after every mini-batch (WithSnapshotEvery); a failed or
// killed run publishes nothing and leaves an earlier checkpoint at spec.Out in place.
// spec.Trace sees jobs.StepRecorded with the count of finished mini-batches after each
// snapshot, and jobs.StepPublished after the commit.
func Run(ctx context.Context, cfg Config, in Inputs, spec jobs.Spec, opt ...Option) (res *Result, err error) {
	o := options{snapshotEvery: 1}
	for _, f := range opt {
		f(&o)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	spec = spec.WithDefaults()
	log, stdout, now := spec.Log, spec.Stdout, spec.Now
	if err := checkReference(in.Policy, in.Ref); err != nil {
		return nil, err
	}
	inputs, err := keyedInputs(in)
	if err != nil {
		return nil, err
	}
	key, err := train.CacheKey(Stage, cfg, inputs, spec.Seed, spec.KeyDebug)
	if err != nil {
		return nil, err
	}
	art, hit, err := train.Begin(spec.Out, key, spec.Force, log)
	if err != nil {
		return nil, fmt.Errorf("update: %w", err)
	}
	if hit != nil {
		st, err := train.Hit(stdout, "update", spec.Out, key)
		if err != nil {
			return nil, err
		}
		return &Result{Dir: spec.Out, Key: key, Hit: true, State: st}, nil
	}
	defer art.Release()

	if err := sameTemperature(in.Logprobs, cfg.Temperature); err != nil {
		return nil, fmt.Errorf("update: %w", err)
	}
	samples, err := LoadSamples(in.Rollouts, in.Logprobs, in.Advantages, cfg.Objective.KLCoef != 0)
	if err != nil {
		return nil, fmt.Errorf("update: %w", err)
	}
	pcg := rand.NewPCG(uint64(spec.Seed), planStream)
	plan, err := Plan(len(samples), cfg.PPOEpochs, cfg.MiniBatches, rand.New(pcg))
	if err != nil {
		return nil, fmt.Errorf("update: %w", err)
	}
	rngState, _ := pcg.MarshalBinary()

	var cur cursor
	src := in.Policy
	snap, resumed := art.LoadSnapshot(&cur)
	if resumed && (cur.Done != snap.Step || cur.Done > len(plan) || len(cur.Metrics) != cur.Done) {
		log.Warn("ignoring inconsistent snapshot; starting over", "dir", snap.Dir, "done", cur.Done, "plan", len(plan))
		resumed, cur = false, cursor{}
	}
	if resumed {
		src = snap.Dir
		log.Info("resuming", "dir", art.Tmp, "mini_batches_done", cur.Done, "of", len(plan))
	}
	m, err := qwen2.Load(src, qwen2.Options{Device: cfg.Device, DType: cfg.DType})
	if err != nil {
		return nil, fmt.Errorf("update: policy: %w", err)
	}
	defer m.Drop()
	if err := fits(m.Config, samples); err != nil {
		return nil, fmt.Errorf("update: %w", err)
	}
	params, err := trainable(m)
	if err != nil {
		return nil, fmt.Errorf("update: %w", err)
	}
	adam, err := train.NewAdamW(params, cfg.AdamW)
	if err != nil {
		return nil, fmt.Errorf("update: %w", err)
	}
	defer adam.Drop()
	prev, err := train.ReadTrainerState(in.Policy)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("update: policy: %w", err)
	}
	if err := loadOptimizer(adam, in.Policy, prev, resumed, snap, log); err != nil {
		return nil, fmt.Errorf("update: %w", err)
	}

	progress := jobs.NewReporter(spec.ProgressOut, spec.Progress, Stage, int64(len(plan)), now, spec.ProgressEvery).Units("mini-batches", "sequences")
	defer progress.Finish()
	if cur.Done > 0 {
		progress.Skip(int64(cur.Done), int64(cur.Done))
	}
	tr := trainer{m: m, obj: cfg.Objective, chunk: cfg.Chunk, temperature: cfg.Temperature}
	for k := cur.Done; k < len(plan); k++ {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("update: mini-batch %d: %w (finished mini-batches are kept in %s)", k+1, err, art.Tmp)
		}
		met, err := step(&tr, adam, samples, plan[k], cfg, now)
		if err != nil {
			return nil, fmt.Errorf("update: mini-batch %d of %d (epoch %d, batch %d): %w; nothing published, %s left as it was",
				k+1, len(plan), plan[k].Epoch, plan[k].Index, err, spec.Out)
		}
		cur.Done, cur.Metrics = k+1, append(cur.Metrics, met)
		progress.Add(1, int64(met.Seqs), int64(met.Tokens))
		if cur.Done%o.snapshotEvery == 0 || cur.Done == len(plan) {
			if err := art.SaveSnapshot(cur.Done, m, adam, cur); err != nil {
				return nil, fmt.Errorf("update: %w", err)
			}
			if spec.Trace != nil {
				spec.Trace(jobs.StepRecorded, cur.Done)
			}
		}
	}

	st := &train.TrainerState{
		Stage: Stage, Step: adam.Steps(), Seed: spec.Seed, RNG: hex.EncodeToString(rngState),
		Cursor:  train.Cursor{Epoch: cfg.PPOEpochs, Done: len(plan), Total: len(plan)},
		Metrics: summary(cur.Metrics),
	}
	if prev != nil {
		st.Iteration = prev.Iteration
	}
	st.Iteration++
	if st.Config, err = jobs.CanonicalJSON(cfg); err != nil {
		return nil, fmt.Errorf("update: %w", err)
	}
	if err := writeCheckpoint(art.Tmp, m, adam, in.Policy, st, cur.Metrics); err != nil {
		return nil, fmt.Errorf("update: %w", err)
	}
	if err := art.Publish(train.Commit{Stage: Stage, CodeVersion: jobs.CodeVersion(), Seed: spec.Seed, Inputs: inputs}); err != nil {
		return nil, fmt.Errorf("update: %w", err)
	}
	if spec.Trace != nil {
		spec.Trace(jobs.StepPublished, -1)
	}
	log.Info("committed", "dir", spec.Out, "key", key.Short(), "step", st.Step, "resumed", snap.Step)
	fmt.Fprintf(stdout, "update: wrote %s (%d mini-batches, %d resumed, step %d, pg_loss %.4g, kl %.4g)\n",
		spec.Out, len(plan), snap.Step, st.Step, st.Metrics["pg_loss"], st.Metrics["kl"])
	return &Result{Dir: spec.Out, Key: key, Resumed: snap.Step, State: st}, nil
}

// Option sets a runtime knob of Run that does not change the output.
type Option func(*options)

type options struct{ snapshotEvery int }

// WithSnapshotEvery saves the resumable snapshot after every n-th mini-batch instead of
// every one (n >= 1): for large models, where a snapshot costs a full checkpoint write.
func WithSnapshotEvery(n int) Option {
	return func(o *options) { o.snapshotEvery = max(n, 1) }
}

// step runs one mini-batch: every micro-batch's forward and backward under the
// mini-batch divisor, then one AdamW step.
func step(tr *trainer, adam *train.AdamW, samples []Sample, b Batch, cfg Config, now func() time.Time) (Metric, error) {
	start := now()
	lengths := make([]int, len(b.Samples))
	for i, s := range b.Samples {
		lengths[i] = len(samples[s].Response)
	}
	div, err := train.Divisor(cfg.Objective.Agg, lengths)
	if err != nil {
		return Metric{}, err
	}
	micros := qwen2.BudgetBatches(b.Samples, func(i int) int { return samples[i].Len() }, cfg.MicroTokenBudget)
	var st train.Stats
	for j, mi := range micros {
		batch := make([]*Sample, len(mi))
		for r, i := range mi {
			batch[r] = &samples[i]
		}
		s, err := tr.micro(batch, div)
		if err != nil {
			adam.ZeroGrad()
			return Metric{}, fmt.Errorf("micro-batch %d of %d (first sample uid %s sample %d turn %d): %w",
				j+1, len(micros), batch[0].UID, batch[0].Sample, batch[0].Turn, err)
		}
		st = st.Merge(s)
	}
	ss, err := adam.Step()
	if zerr := adam.ZeroGrad(); err == nil {
		err = zerr
	}
	if err != nil {
		return Metric{}, err
	}
	sec := now().Sub(start).Seconds()
	met := Metric{Step: adam.Steps(), Epoch: b.Epoch, MiniBatch: b.Index, Stats: st,
		GradNorm: ss.GradNorm, LR: ss.LR, Seqs: len(b.Samples), Micro: len(micros), Seconds: sec}
	if sec > 0 {
		met.TokensPerS = float64(st.Tokens) / sec
	}
	return met, nil
}

// loadOptimizer restores the optimizer state: the snapshot's when resuming, else the
// input policy's optimizer.safetensors when it continues an RL lineage (the state of
// step k is an input of step k+1). An SFT checkpoint's optimizer state is not carried
// into RL: its moments and step count belong to another objective and LR schedule, and
// verl likewise starts RL with a fresh optimizer.
func loadOptimizer(adam *train.AdamW, policy string, prev *train.TrainerState, resumed bool, snap train.Snapshot, log *slog.Logger) error {
	if resumed {
		return train.LoadOptimizer(filepath.Join(snap.Dir, train.OptimizerFile), adam)
	}
	path := filepath.Join(policy, train.OptimizerFile)
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if prev != nil && prev.Stage != Stage {
		log.Info("fresh optimizer: the policy's optimizer state is from another stage", "stage", prev.Stage)
		return nil
	}
	return train.LoadOptimizer(path, adam)
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

// writeCheckpoint writes the artifact's files into dir (see train.Begin for the
// layout); the commit record follows in Publish.
func writeCheckpoint(dir string, m *qwen2.Model, adam *train.AdamW, policy string, st *train.TrainerState, mets []Metric) error {
	if err := m.Save(dir, maxShardBytes); err != nil {
		return err
	}
	tok := filepath.Join(policy, train.TokenizerFile)
	if _, err := os.Stat(tok); err == nil {
		if err := train.CopyFile(filepath.Join(dir, train.TokenizerFile), tok); err != nil {
			return err
		}
	}
	if err := train.SaveOptimizer(filepath.Join(dir, train.OptimizerFile), adam); err != nil {
		return err
	}
	var lines []byte
	for _, met := range mets {
		b, err := json.Marshal(met)
		if err != nil {
			return err
		}
		lines = append(append(lines, b...), '\n')
	}
	if err := renameio.WriteFile(filepath.Join(dir, train.MetricsFile), lines); err != nil {
		return err
	}
	return train.WriteJSON(filepath.Join(dir, train.TrainerStateFile), st)
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
	// tokens/s stays in metrics.jsonl: trainer_state.json is content, timings are not.
	return out
}

// keyedInputs names every input by digest, for the cache key and the commit record.
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
			i, err = jobs.DirInput(d.name, d.dir)
		}
		if err != nil {
			return nil, fmt.Errorf("update: %w", err)
		}
		out = append(out, i)
	}
	return out, nil
}
