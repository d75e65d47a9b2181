package sft

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"time"

	"github.com/mempo/mempo/agent/protocol"
	"github.com/mempo/mempo/agent/search"
	"github.com/mempo/mempo/agent/task"
	"github.com/mempo/mempo/format"
	"github.com/mempo/mempo/internal/renameio"
	"github.com/mempo/mempo/jobs"
	"github.com/mempo/mempo/model/bpe"
	"github.com/mempo/mempo/model/qwen2"
	"github.com/mempo/mempo/train"
)

// Result says what Run did.
type Result struct {
	Dir     string
	Key     jobs.Key
	Hit     bool
	Resumed int // optimizer steps taken from an interrupted run's snapshot
	State   *train.TrainerState
}

// Metric is one line of metrics.jsonl: one optimizer step.
type Metric struct {
	Step       int64   `json:"step"`
	Epoch      int     `json:"epoch"`
	Loss       float64 `json:"loss"` // mean NLL of the batch's response tokens
	GradNorm   float64 `json:"grad_norm"`
	LR         float64 `json:"lr"`
	Tokens     int     `json:"tokens"`
	Seqs       int     `json:"seqs"`
	Seconds    float64 `json:"seconds"`
	TokensPerS float64 `json:"tokens_per_s"`
}

type cursor struct {
	Done       int      `json:"done"`
	HeldBefore float64  `json:"heldout_loss_before"`
	Metrics    []Metric `json:"metrics"`
}

// Option sets a runtime knob of Run that does not change the output.
type Option func(*options)

type options struct{ snapshotEvery int }

// WithSnapshotEvery saves a resumable snapshot every n optimizer steps as well as at
// the end of each epoch (n <= 0: at epoch ends only).
func WithSnapshotEvery(n int) Option { return func(o *options) { o.snapshotEvery = n } }

// planStream separates the data order's PCG stream from the oracle's use of the seed.
const planStream = 0x7366742d706c616e // "sft-plan"

// Run clones the oracle into the checkpoint spec.Out. It is keyed by task.json, the
// prompts dataset, the index, the policy, cfg and the seed; a rerun with the same key is
// a cache hit, and a killed run resumes from its last snapshot in the temp dir beside
// spec.Out and ends with the same weights.
func Run(ctx context.Context, cfg Config, in Inputs, spec jobs.Spec, opt ...Option) (*Result, error) {
	var o options
	for _, f := range opt {
		f(&o)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	p := cfg.Protocol
	if p == nil {
		p = protocol.Default()
	}
	spec = spec.WithDefaults()
	log, stdout, now := spec.Log, spec.Stdout, spec.Now
	w, qs, err := questions(in, cfg.Questions)
	if err != nil {
		return nil, fmt.Errorf("sft: %w", err)
	}
	if in.Index == "" {
		return nil, fmt.Errorf("sft: no --index: the oracle searches the index the rollouts use (build it with `mempo index --corpus %s`): %w",
			filepath.Join(in.Task, task.CorpusFile), ErrConfig)
	}
	idx, err := search.OpenLocal(in.Index, search.LocalConfig{})
	if err != nil {
		return nil, fmt.Errorf("sft: --index: %w", err)
	}
	defer idx.Close()
	inputs, err := keyedInputs(in, idx.Meta().Key)
	if err != nil {
		return nil, fmt.Errorf("sft: %w", err)
	}
	key, err := train.CacheKey(Stage, cfg, inputs, spec.Seed, spec.KeyDebug)
	if err != nil {
		return nil, err
	}
	art, hit, err := train.Begin(spec.Out, key, spec.Force, log)
	if err != nil {
		return nil, fmt.Errorf("sft: %w", err)
	}
	if hit != nil {
		st, err := train.Hit(stdout, "sft", spec.Out, key)
		if err != nil {
			return nil, err
		}
		return &Result{Dir: spec.Out, Key: key, Hit: true, State: st}, nil
	}
	defer art.Release()

	tok, err := bpe.Load(filepath.Join(in.Policy, train.TokenizerFile))
	if err != nil {
		return nil, fmt.Errorf("sft: policy tokenizer: %w", err)
	}
	mc, err := qwen2.ReadConfig(filepath.Join(in.Policy, qwen2.ConfigFile))
	if err != nil {
		return nil, fmt.Errorf("sft: policy: %w", err)
	}
	if err := mc.CheckVocab(tok.VocabSize()); err != nil {
		return nil, fmt.Errorf("sft: policy %s: %w", in.Policy, err)
	}

	// The oracle's trajectories and their replay: everything the training reads.
	oracle, err := task.NewOracle(w, p, search.Documents{R: idx, TopK: cfg.RetrievalTopK}, task.OracleConfig{
		Drop: cfg.OracleDrop, Distractor: cfg.OracleDistractor, MaxTurns: cfg.MaxTurns, Seed: uint64(spec.Seed)})
	if err != nil {
		return nil, fmt.Errorf("sft: %w", err)
	}
	trajs := make([]task.Trajectory, len(qs))
	perTraj := make([][]int, len(qs))
	var examples []example
	for i, q := range qs {
		if trajs[i], err = oracle.Play(ctx, q); err != nil {
			return nil, fmt.Errorf("sft: oracle: %w", err)
		}
		exs, err := replay(p, tok, protocol.Config{Context: cfg.Context, MaxTurns: cfg.MaxTurns}, q, trajs[i])
		if err != nil {
			return nil, fmt.Errorf("sft: %w", err)
		}
		for _, e := range exs {
			if e.len() > mc.MaxPositions {
				return nil, fmt.Errorf("sft: question %s turn %d: %d tokens exceed the policy's max_position_embeddings %d: sequence longer than the model's context: %w",
					e.UID, e.Turn, e.len(), mc.MaxPositions, ErrInput)
			}
			perTraj[i] = append(perTraj[i], len(examples))
			examples = append(examples, e)
		}
	}
	pcg := rand.NewPCG(uint64(spec.Seed), planStream)
	rng := rand.New(pcg)
	trainT, heldT := split(len(qs), cfg.HeldOut, rng)
	var trainIdx []int
	var held []example
	for _, i := range trainT {
		trainIdx = append(trainIdx, perTraj[i]...)
	}
	for _, i := range heldT {
		for _, j := range perTraj[i] {
			held = append(held, examples[j])
		}
	}
	steps := plan(examples, trainIdx, cfg.Epochs, cfg.BatchTokens, rng)
	rngState, _ := pcg.MarshalBinary()

	var cur cursor
	src := in.Policy
	snap, resumed := art.LoadSnapshot(&cur)
	if resumed && (cur.Done != snap.Step || cur.Done > len(steps) || len(cur.Metrics) != cur.Done) {
		log.Warn("ignoring inconsistent snapshot; starting over", "dir", snap.Dir)
		resumed, cur = false, cursor{}
	}
	if resumed {
		src = snap.Dir
	}
	m, err := qwen2.Load(src, qwen2.Options{Device: cfg.Device, DType: cfg.DType})
	if err != nil {
		return nil, fmt.Errorf("sft: policy: %w", err)
	}
	defer m.Drop()
	tr := trainer{m: m, chunk: cfg.Chunk, ctxWeight: cfg.ContextLossWeight}
	if !resumed {
		if cur.HeldBefore, err = tr.eval(held, cfg.BatchTokens); err != nil {
			return nil, fmt.Errorf("sft: held-out loss: %w", err)
		}
	}
	params, err := trainable(m)
	if err != nil {
		return nil, fmt.Errorf("sft: %w", err)
	}
	// SFT starts a fresh optimizer whatever the policy holds: it is the first training
	// of a lineage, on an objective of its own.
	adam, err := train.NewAdamW(params, cfg.AdamW)
	if err != nil {
		return nil, fmt.Errorf("sft: %w", err)
	}
	defer adam.Drop()
	if resumed {
		if err := train.LoadOptimizer(filepath.Join(snap.Dir, train.OptimizerFile), adam); err != nil {
			return nil, fmt.Errorf("sft: resume: %w", err)
		}
		log.Info("resuming", "dir", art.Tmp, "steps_done", cur.Done, "of", len(steps))
	}

	progress := jobs.NewReporter(spec.ProgressOut, spec.Progress, Stage, int64(len(steps)), now, spec.ProgressEvery).Units("steps", "sequences")
	defer progress.Finish()
	progress.Skip(int64(cur.Done), 0)
	for k := cur.Done; k < len(steps); k++ {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("sft: step %d: %w", k+1, err)
		}
		met, err := trainStep(&tr, adam, cfg, examples, steps[k], int64(len(steps)), now)
		if err != nil {
			return nil, fmt.Errorf("sft: step %d of %d (epoch %d): %w; nothing published, %s left as it was", k+1, len(steps), steps[k].Epoch, err, spec.Out)
		}
		cur.Done, cur.Metrics = k+1, append(cur.Metrics, met)
		progress.Add(1, int64(met.Seqs), int64(met.Tokens))
		epochEnd := k+1 == len(steps) || steps[k+1].Epoch != steps[k].Epoch
		if epochEnd || (o.snapshotEvery > 0 && cur.Done%o.snapshotEvery == 0) {
			if err := art.SaveSnapshot(cur.Done, m, adam, cur); err != nil {
				return nil, fmt.Errorf("sft: %w", err)
			}
			if spec.Trace != nil {
				spec.Trace(jobs.StepRecorded, cur.Done)
			}
		}
	}
	after, err := tr.eval(held, cfg.BatchTokens)
	if err != nil {
		return nil, fmt.Errorf("sft: held-out loss: %w", err)
	}

	st := &train.TrainerState{Stage: Stage, Step: adam.Steps(), Seed: spec.Seed, RNG: hex.EncodeToString(rngState),
		Cursor:  train.Cursor{Epoch: cfg.Epochs, Done: len(steps), Total: len(steps)},
		Metrics: summary(cur, after, trajs, len(examples), len(held))}
	if st.Config, err = jobs.CanonicalJSON(cfg); err != nil {
		return nil, fmt.Errorf("sft: %w", err)
	}
	if err := writeCheckpoint(art.Tmp, m, adam, in.Policy, st, cur.Metrics, trajs); err != nil {
		return nil, fmt.Errorf("sft: %w", err)
	}
	if err := art.Publish(train.Commit{Stage: Stage, CodeVersion: jobs.CodeVersion(), Seed: spec.Seed, Inputs: inputs}); err != nil {
		return nil, fmt.Errorf("sft: %w", err)
	}
	if spec.Trace != nil {
		spec.Trace(jobs.StepPublished, -1)
	}
	fmt.Fprintf(stdout, "sft: wrote %s (%d trajectories, %d turns, %d steps, held-out loss %.4f → %.4f)\n",
		spec.Out, len(trajs), len(examples), len(steps), cur.HeldBefore, after)
	return &Result{Dir: spec.Out, Key: key, Resumed: snap.Step, State: st}, nil
}

// trainStep runs one batch: forward, backward, one AdamW step at the schedule's LR.
func trainStep(tr *trainer, adam *train.AdamW, cfg Config, examples []example, b batch, total int64, now func() time.Time) (Metric, error) {
	start := now()
	k := adam.Steps() + 1
	if err := adam.SetLR(cfg.lrAt(k, total)); err != nil {
		return Metric{}, err
	}
	exs := make([]*example, len(b.Examples))
	for i, j := range b.Examples {
		exs[i] = &examples[j]
	}
	loss, tokens, err := tr.backward(exs)
	if err != nil {
		adam.ZeroGrad()
		return Metric{}, err
	}
	ss, err := adam.Step()
	if zerr := adam.ZeroGrad(); err == nil {
		err = zerr
	}
	if err != nil {
		return Metric{}, err
	}
	met := Metric{Step: adam.Steps(), Epoch: b.Epoch, Loss: loss, GradNorm: ss.GradNorm, LR: ss.LR,
		Tokens: tokens, Seqs: len(exs), Seconds: now().Sub(start).Seconds()}
	if met.Seconds > 0 {
		met.TokensPerS = float64(tokens) / met.Seconds
	}
	return met, nil
}

func summary(cur cursor, after float64, trajs []task.Trajectory, turns, held int) map[string]float64 {
	out := map[string]float64{
		"trajectories": float64(len(trajs)), "turns": float64(turns), "heldout_turns": float64(held),
		"steps": float64(len(cur.Metrics)),
	}
	if held > 0 {
		out["heldout_loss_before"], out["heldout_loss_after"] = cur.HeldBefore, after
	}
	var found, kept, tokens float64
	for _, t := range trajs {
		found += float64(t.Found)
		kept += float64(t.Kept)
	}
	if found > 0 {
		out["oracle_retention"] = kept / found
	}
	for _, m := range cur.Metrics {
		tokens += float64(m.Tokens)
	}
	if n := len(cur.Metrics); n > 0 {
		out["train_loss_first"] = cur.Metrics[0].Loss
		out["train_loss_last"] = cur.Metrics[n-1].Loss
	}
	out["tokens"] = tokens
	// tokens/s stays in metrics.jsonl: trainer_state.json is content, timings are not.
	return out
}

func writeCheckpoint(dir string, m *qwen2.Model, adam *train.AdamW, policy string, st *train.TrainerState, mets []Metric, trajs []task.Trajectory) error {
	if err := m.Save(dir, 5<<30); err != nil {
		return err
	}
	if err := train.CopyFile(filepath.Join(dir, train.TokenizerFile), filepath.Join(policy, train.TokenizerFile)); err != nil {
		return err
	}
	if err := train.SaveOptimizer(filepath.Join(dir, train.OptimizerFile), adam); err != nil {
		return err
	}
	var lines bytes.Buffer
	enc := json.NewEncoder(&lines)
	for _, met := range mets {
		if err := enc.Encode(met); err != nil {
			return err
		}
	}
	if err := renameio.WriteFile(filepath.Join(dir, train.MetricsFile), lines.Bytes()); err != nil {
		return err
	}
	var oracle bytes.Buffer
	if err := task.WriteJSONL(&oracle, trajs); err != nil {
		return err
	}
	if err := renameio.WriteFile(filepath.Join(dir, OracleFile), oracle.Bytes()); err != nil {
		return err
	}
	return train.WriteJSON(filepath.Join(dir, train.TrainerStateFile), st)
}

func keyedInputs(in Inputs, indexKey string) ([]format.Input, error) {
	taskIn, err := jobs.FileInput("task", filepath.Join(in.Task, task.SummaryFile))
	if err != nil {
		return nil, err
	}
	prompts, err := jobs.DatasetInput("prompts", in.prompts())
	if err != nil {
		return nil, err
	}
	policy, err := jobs.DirInput("policy", in.Policy)
	if err != nil {
		return nil, err
	}
	// The index is named by the key its meta file records (corpus bytes, analyzer,
	// format), as the rollout stage names it: hashing a large index's files is slow.
	index := format.Input{Name: "index", Path: filepath.Clean(in.Index), Digest: "index:" + indexKey}
	return []format.Input{taskIn, prompts, index, policy}, nil
}
