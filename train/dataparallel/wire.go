package dataparallel

import (
	"github.com/mempo/mempo/model/qwen2"
	"github.com/mempo/mempo/train"
)

// The leader and a worker talk over the worker's standard input and output, one gob
// stream each way: the worker greets, the leader sets it up, the worker says it is
// ready, then each step is a work message answered by a done message. The leader
// closes the worker's input to end it.

// hello is the worker's first message, sent before it reads anything: a child that
// does not send it is not serving (the executable does not call ServeWorker).
type hello struct {
	PID int
}

// setup builds the worker's replica: the model's config.json and the options it is
// loaded with, the layout of the shared regions, the worker's rank (its gradient
// region), the thread count and the step it runs, NLL or PPO.
type setup struct {
	Rank    int
	Threads int
	Config  []byte // config.json of the model
	Options qwen2.Options
	Layout  layout
	NLL     *nllConfig
	PPO     *ppoConfig
}

// nllConfig is train.NLLStep without its model.
type nllConfig struct {
	Chunk          int
	ContextWeight  float64
	GradCheckpoint bool
	SharePrefixes  bool
}

func nllOf(s train.NLLStep) *nllConfig {
	return &nllConfig{Chunk: s.Chunk, ContextWeight: s.ContextWeight, GradCheckpoint: s.GradCheckpoint, SharePrefixes: s.SharePrefixes}
}

func (c nllConfig) on(m *qwen2.Model) train.NLLStep {
	return train.NLLStep{Model: m, Chunk: c.Chunk, ContextWeight: c.ContextWeight, GradCheckpoint: c.GradCheckpoint, SharePrefixes: c.SharePrefixes}
}

// ppoConfig is train.PPOStep without its model.
type ppoConfig struct {
	Objective      train.Objective
	Chunk          int
	Temperature    float64
	GradCheckpoint bool
	SharePrefixes  bool
}

func ppoOf(s train.PPOStep) *ppoConfig {
	return &ppoConfig{Objective: s.Objective, Chunk: s.Chunk, Temperature: s.Temperature, GradCheckpoint: s.GradCheckpoint, SharePrefixes: s.SharePrefixes}
}

func (c ppoConfig) on(m *qwen2.Model) train.PPOStep {
	return train.PPOStep{Model: m, Objective: c.Objective, Chunk: c.Chunk, Temperature: c.Temperature, GradCheckpoint: c.GradCheckpoint, SharePrefixes: c.SharePrefixes}
}

// ready answers setup; Err says why the replica could not be built.
type ready struct {
	Err string
}

// work is one step's share, sent when the leader's weights are in the shared weights
// region: for NLL, part of a batch and the whole batch's totals; for PPO, micro-batches
// of a mini-batch and its divisor.
type work struct {
	Pairs   []qwen2.Pair
	Whole   train.Totals
	Micros  [][]train.Sequence
	Divisor float64
}

// done answers work with the share's figures, its gradients in the worker's region,
// or why it failed: NLL's loss and response tokens (train.NLLStep.BackwardPart), or
// PPO's merged stats (train.PPOStep.Micro).
type done struct {
	Loss    float64
	Tokens  int
	Stats   train.Stats
	Seconds float64 // the share's forward and backward passes
	Err     string
}
