package sft

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"time"

	"github.com/mempo/mempo/agent/protocol"
	"github.com/mempo/mempo/agent/search"
	"github.com/mempo/mempo/agent/task"
	"github.com/mempo/mempo/format"
	"github.com/mempo/mempo/internal/renameio"
	"github.com/mempo/mempo/jobs"
	"github.com/mempo/mempo/model/bpe"
	"github.com/mempo/mempo/model/chat"
	"github.com/mempo/mempo/model/qwen2"
	"github.com/mempo/mempo/model/torch"
	"github.com/mempo/mempo/train"
	"github.com/mempo/mempo/train/dataparallel"
)

// Metric is one line of _metrics.jsonl: one optimizer step.
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

// Size is the step's sequences and response tokens, for the progress display.
func (m Metric) Size() (seqs, tokens int) { return m.Seqs, m.Tokens }

// planStream separates the data order's PCG stream from the oracle's use of the seed.
const planStream = 0x7366742d706c616e // "sft-plan"

// heldBefore names the held-out loss before training among Start's figures.
const heldBefore = "heldout_loss_before"

// Run clones the oracle, or the turns of in.Rollouts, into the checkpoint spec.Out with
// the training loop update and SFT share (train.Loop). It is keyed by task.json, the
// prompts dataset and the index (or the rollouts), the policy, cfg and the seed; a rerun with the same key is a cache hit, and a killed run
// resumes from its last snapshot in the temp dir beside spec.Out and ends with the same
// weights. Snapshots are saved at each epoch's end unless opt says otherwise
// (train.WithSnapshotEvery).
func Run(ctx context.Context, cfg Config, in Inputs, spec jobs.Spec, opt ...train.Option) (*train.Result, error) {
	torch.BoundHeap()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	p := cfg.Protocol
	if p == nil {
		p = protocol.Default()
	}
	spec = spec.WithDefaults()
	r := &run{cfg: cfg, in: in, p: p, seed: spec.Seed, now: spec.Now, log: spec.Log,
		trainer: dataparallel.NewTrainer(cfg.Runtime, spec.Log)}
	var inputs []format.Input
	var err error
	switch {
	case in.Rollouts != "" && in.Task != "":
		return nil, fmt.Errorf("sft: --task and --rollouts: clone the task's oracle or train on rollouts, not both: %w", ErrConfig)
	case in.Rollouts == "" && in.Task == "":
		return nil, fmt.Errorf("sft: no --task and no --rollouts: clone a task's oracle (--task, --index) or train on a rollouts dataset (--rollouts): %w", ErrConfig)
	case in.Rollouts != "":
		if inputs, err = rolloutInputs(in); err != nil {
			return nil, fmt.Errorf("sft: %w", err)
		}
	default:
		var idx *search.Local
		if idx, inputs, err = r.oracleInputs(); err != nil {
			return nil, fmt.Errorf("sft: %w", err)
		}
		defer idx.Close()
	}
	loop := train.Loop[Metric]{
		Stage: Stage, Unit: "step", Units: "steps",
		Config: cfg, Inputs: inputs, From: in.Policy, Spec: spec,
		Model: cfg.Options(), AdamW: cfg.AdamW,
		Prepare: r.prepare, Start: r.start, Step: r.step, Finish: r.finish, Write: r.write,
		Memory: r.memory, BatchFlag: "--batch-tokens", Group: train.Ranks(cfg.WorldSize, cfg.Group),
	}
	defer r.trainer.Close()
	res, err := loop.Run(ctx, append([]train.Option{train.WithSnapshotEvery(0)}, opt...)...)
	if err != nil || res.Hit || res.State == nil { // no State: a rank that wrote nothing
		return res, err
	}
	fmt.Fprintf(spec.Stdout, "sft: wrote %s (%d trajectories, %d turns, %d steps, held-out loss %.4f → %.4f)\n",
		spec.Out, r.trajectories, len(r.examples), len(r.steps), r.before, r.after)
	return res, nil
}

// oracleInputs regenerates the task's world and questions and opens the index for the
// oracle, and returns the index and the keyed inputs of SFT on the task.
func (r *run) oracleInputs() (*search.Local, []format.Input, error) {
	w, qs, err := questions(r.in, r.cfg.Questions)
	if err != nil {
		return nil, nil, err
	}
	if r.in.Index == "" {
		return nil, nil, fmt.Errorf("no --index: the oracle searches the index the rollouts use (build it with `mempo index --corpus %s`): %w",
			filepath.Join(r.in.Task, task.CorpusFile), ErrConfig)
	}
	idx, err := search.OpenLocal(r.in.Index, search.LocalConfig{})
	if err != nil {
		return nil, nil, fmt.Errorf("--index: %w", err)
	}
	inputs, err := keyedInputs(r.in)
	if err != nil {
		idx.Close()
		return nil, nil, err
	}
	r.world, r.questions, r.index = w, qs, idx
	return idx, inputs, nil
}

// run holds one SFT's data: the oracle's trajectories replayed into examples, the
// held-out ones and the plan, built after a cache miss.
type run struct {
	cfg       Config
	in        Inputs
	p         *protocol.Protocol
	chat      protocol.Chat // the policy's chat template; nil: the protocol's glue
	seed      int64
	now       func() time.Time
	log       *slog.Logger
	world     *task.World
	questions []task.Prompt
	index     search.Retriever

	trajs         []task.Trajectory // the oracle's; none when training on rollouts
	trajectories  int               // the trajectories examples come from
	examples      []example
	held          []example
	steps         []batch
	before, after float64      // held-out loss
	model         qwen2.Config // the policy's, in the dtype it trains in
	trainer       *dataparallel.Trainer
}

// prepare plays the oracle on every question, replays each trajectory through the
// policy's tokenizer into examples, holds some trajectories out and plans the batches.
func (r *run) prepare(ctx context.Context) (train.Plan, error) {
	// The weights are verified as they load; the tokenizer and config are read first.
	if err := format.VerifyCheckpoint(r.in.Policy, format.TokenizerFile, qwen2.ConfigFile); err != nil {
		return train.Plan{}, fmt.Errorf("policy: %w", err)
	}
	tok, err := bpe.Load(filepath.Join(r.in.Policy, format.TokenizerFile))
	if err != nil {
		return train.Plan{}, fmt.Errorf("policy tokenizer: %w", err)
	}
	mc, err := qwen2.ReadConfig(filepath.Join(r.in.Policy, qwen2.ConfigFile))
	if err != nil {
		return train.Plan{}, fmt.Errorf("policy: %w", err)
	}
	if err := mc.CheckTokenizer(tok, bpe.ImStart, bpe.ImEnd); err != nil {
		return train.Plan{}, fmt.Errorf("policy %s: %w", r.in.Policy, err)
	}
	tmpl, err := chat.ForCheckpoint(r.in.Policy, r.cfg.ChatTemplate, r.log)
	if err != nil {
		return train.Plan{}, fmt.Errorf("policy: %w", err)
	}
	if tmpl != nil {
		r.chat = tmpl
	}
	r.model = mc
	if r.cfg.DType != "" {
		r.model.TorchDType = r.cfg.DType
	}
	var perTraj [][]int
	if r.in.Rollouts != "" {
		r.examples, perTraj, err = fromRollouts(r.in.Rollouts, mc.MaxPositions)
	} else {
		perTraj, err = r.clone(ctx, tok, mc.MaxPositions)
	}
	if err != nil {
		return train.Plan{}, err
	}
	r.trajectories = len(perTraj)
	return r.layout(perTraj), nil
}

// clone plays the oracle on every question and replays each trajectory into examples,
// every one within the model's context; perTraj lists each trajectory's examples.
func (r *run) clone(ctx context.Context, tok *bpe.Tokenizer, maxPositions int) (perTraj [][]int, err error) {
	oracle, err := task.NewOracle(r.world, r.p, search.Documents{R: r.index, TopK: r.cfg.RetrievalTopK}, task.OracleConfig{
		Drop: r.cfg.OracleDrop, Distractor: r.cfg.OracleDistractor, MaxTurns: r.cfg.MaxTurns, Seed: uint64(r.seed)})
	if err != nil {
		return nil, err
	}
	r.trajs = make([]task.Trajectory, len(r.questions))
	perTraj = make([][]int, len(r.questions))
	for i, q := range r.questions {
		if r.trajs[i], err = oracle.Play(ctx, q); err != nil {
			return nil, fmt.Errorf("oracle: %w", err)
		}
		exs, err := replay(r.p, r.chat, tok, protocol.Config{Context: r.cfg.Context, MaxTurns: r.cfg.MaxTurns}, q, r.trajs[i])
		if err != nil {
			return nil, err
		}
		for _, e := range exs {
			if e.len() > maxPositions {
				return nil, fmt.Errorf("question %s turn %d: %d tokens exceed the policy's max_position_embeddings %d: sequence longer than the model's context: %w",
					e.UID, e.Turn, e.len(), maxPositions, ErrInput)
			}
			perTraj[i] = append(perTraj[i], len(r.examples))
			r.examples = append(r.examples, e)
		}
	}
	return perTraj, nil
}

// layout holds some trajectories out, by the seed, and plans the batches of the rest.
func (r *run) layout(perTraj [][]int) train.Plan {
	pcg := rand.NewPCG(uint64(r.seed), planStream)
	rng := rand.New(pcg)
	trainT, heldT := split(len(perTraj), r.cfg.HeldOut, rng)
	var trainIdx []int
	for _, i := range trainT {
		trainIdx = append(trainIdx, perTraj[i]...)
	}
	for _, i := range heldT {
		for _, j := range perTraj[i] {
			r.held = append(r.held, r.examples[j])
		}
	}
	r.steps = plan(r.examples, trainIdx, r.cfg.Epochs, r.cfg.BatchTokens, rng)
	state, _ := pcg.MarshalBinary()
	p := train.Plan{Epochs: r.cfg.Epochs, RNG: state}
	for _, b := range r.steps {
		p.Epoch = append(p.Epoch, b.Epoch)
	}
	return p
}

// memory estimates the peak memory of the plan: its largest batch, each one pass.
func (r *run) memory() (train.Memory, error) {
	passes := make([]train.Pass, len(r.steps))
	nll := r.nll(nil)
	for k, b := range r.steps {
		passes[k] = nll.Pass(b.pairs(r.examples))
	}
	s := train.Shape{Chunk: r.cfg.Chunk, GradCheckpoint: r.cfg.GradCheckpoint, CUDA: strings.HasPrefix(r.cfg.Device, "cuda"), Attention: r.cfg.Attention}
	m := train.PlanMemory(r.model, s, passes)
	m.Replicas = train.ReplicaMemory(m, r.cfg.Procs)
	return m, nil
}

// nll is the supervised step on m with the config's chunk and context weight.
func (r *run) nll(m *qwen2.Model) train.NLLStep {
	return train.NLLStep{Model: m, Chunk: r.cfg.Chunk, ContextWeight: r.cfg.ContextLossWeight,
		GradCheckpoint: r.cfg.GradCheckpoint, SharePrefixes: r.cfg.shares()}
}

// start measures the held-out loss of the policy before training.
func (r *run) start(m *qwen2.Model) (map[string]float64, error) {
	defer r.allThreads()()
	before, err := heldOutLoss(m, r.held, r.cfg.BatchTokens, r.cfg.Chunk)
	if err != nil {
		return nil, fmt.Errorf("held-out loss: %w", err)
	}
	return map[string]float64{heldBefore: before}, nil
}

// allThreads lends the held-out scoring, which runs in the leader alone while any
// workers wait, their threads too; the returned func restores the count.
func (r *run) allThreads() (restore func()) {
	n := torch.NumThreads()
	if r.cfg.Procs < 2 || torch.SetNumThreads(n*r.cfg.Procs) != nil {
		return func() {}
	}
	return func() { torch.SetNumThreads(n) }
}

// step runs step k of the plan, batch steps[k], on the model being trained: its
// forward and backward passes and one AdamW step at the schedule's LR, where the
// config's runtime puts them (r.trainer).
func (r *run) step(k int, m *qwen2.Model, adam *train.AdamW) (Metric, error) {
	start := r.now()
	b := r.steps[k]
	if err := adam.SetLR(r.cfg.lrAt(adam.Steps()+1, int64(len(r.steps)))); err != nil {
		return Metric{}, err
	}
	loss, tokens, ss, err := r.trainer.NLL(r.nll(m), adam, b.pairs(r.examples))
	if err != nil {
		return Metric{}, err
	}
	met := Metric{Step: adam.Steps(), Epoch: b.Epoch, Loss: loss, GradNorm: ss.GradNorm, LR: ss.LR,
		Tokens: tokens, Seqs: len(b.Examples), Seconds: r.now().Sub(start).Seconds()}
	if met.Seconds > 0 {
		met.TokensPerS = float64(tokens) / met.Seconds
	}
	return met, nil
}

// finish measures the held-out loss after training and sums the run up.
func (r *run) finish(m *qwen2.Model, start map[string]float64, mets []Metric) (map[string]float64, error) {
	defer r.allThreads()()
	var err error
	if r.after, err = heldOutLoss(m, r.held, r.cfg.BatchTokens, r.cfg.Chunk); err != nil {
		return nil, fmt.Errorf("held-out loss: %w", err)
	}
	r.before = start[heldBefore]
	return summary(r.before, r.after, mets, r.trajectories, r.trajs, len(r.examples), len(r.held)), nil
}

// write adds the oracle's trajectories cloned to the checkpoint (none when training
// on rollouts, which stay in their dataset).
func (r *run) write(dir string) error {
	if r.in.Rollouts != "" {
		return nil
	}
	var oracle bytes.Buffer
	if err := task.WriteJSONL(&oracle, r.trajs); err != nil {
		return err
	}
	return renameio.WriteFile(filepath.Join(dir, OracleFile), oracle.Bytes())
}

// summary is trainer_state.json's metrics: the data's sizes, the held-out loss before
// and after, the oracle's retention and the first and last training loss.
func summary(before, after float64, mets []Metric, trajectories int, trajs []task.Trajectory, turns, held int) map[string]float64 {
	out := map[string]float64{
		"trajectories": float64(trajectories), "turns": float64(turns), "heldout_turns": float64(held),
		"steps": float64(len(mets)),
	}
	if held > 0 {
		out[heldBefore], out["heldout_loss_after"] = before, after
	}
	var found, kept, tokens float64
	for _, t := range trajs {
		found += float64(t.Found)
		kept += float64(t.Kept)
	}
	if found > 0 {
		out["oracle_retention"] = kept / found
	}
	for _, m := range mets {
		tokens += float64(m.Tokens)
	}
	if n := len(mets); n > 0 {
		out["train_loss_first"] = mets[0].Loss
		out["train_loss_last"] = mets[n-1].Loss
	}
	out["tokens"] = tokens
	// tokens/s stays in _metrics.jsonl: trainer_state.json is content, timings are not.
	return out
}

// keyedInputs names the task, its prompts, the index and the policy by digest, the
// committed ones (index, policy) by their commit records, as the rollout stage names them.
func keyedInputs(in Inputs) ([]format.Input, error) {
	taskIn, err := jobs.FileInput("task", filepath.Join(in.Task, task.SummaryFile))
	if err != nil {
		return nil, err
	}
	prompts, err := jobs.DatasetInput("prompts", in.prompts())
	if err != nil {
		return nil, err
	}
	policy, err := jobs.CheckpointInput("policy", in.Policy)
	if err != nil {
		return nil, err
	}
	index, err := jobs.CheckpointInput("index", in.Index)
	if err != nil {
		return nil, err
	}
	return []format.Input{taskIn, prompts, index, policy}, nil
}
