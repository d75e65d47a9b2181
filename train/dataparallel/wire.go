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
// region), the thread count and the step's settings.
type setup struct {
	Rank    int
	Threads int
	Config  []byte // config.json of the model
	Options qwen2.Options
	Layout  layout
	Step    stepConfig
}

// stepConfig is train.NLLStep without its model.
type stepConfig struct {
	Chunk          int
	ContextWeight  float64
	GradCheckpoint bool
	SharePrefixes  bool
}

func configOf(s train.NLLStep) stepConfig {
	return stepConfig{Chunk: s.Chunk, ContextWeight: s.ContextWeight, GradCheckpoint: s.GradCheckpoint, SharePrefixes: s.SharePrefixes}
}

func (c stepConfig) on(m *qwen2.Model) train.NLLStep {
	return train.NLLStep{Model: m, Chunk: c.Chunk, ContextWeight: c.ContextWeight, GradCheckpoint: c.GradCheckpoint, SharePrefixes: c.SharePrefixes}
}

// ready answers setup; Err says why the replica could not be built.
type ready struct {
	Err string
}

// work is one step's share: the pairs and the whole batch's totals. The leader's
// weights are in the shared weights region when it is sent.
type work struct {
	Pairs []qwen2.Pair
	Whole train.Totals
}

// done answers work: the share's loss and response tokens (train.NLLStep.BackwardPart),
// its gradients in the worker's region, or why it failed.
type done struct {
	Loss    float64
	Tokens  int
	Seconds float64 // the share's forward and backward passes
	Err     string
}
