package main

import (
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/mempo/mempo/agent/protocol"
	"github.com/mempo/mempo/cmd/internal/app"
	"github.com/mempo/mempo/cmd/internal/torchflag"
	"github.com/mempo/mempo/stages/sft"
	"github.com/mempo/mempo/train"
)

// sftCmd is what 'mempo sft' resolves its flags into.
type sftCmd struct {
	cfg sft.Config
	in  sft.Inputs
	// snapshotEvery adds snapshots between the ones at each epoch's end; 0 adds none.
	snapshotEvery int
	// deviceMemory is --device-memory, in GiB.
	deviceMemory float64
	// distTimeout is --dist-timeout: how long the ranks wait for one another.
	distTimeout time.Duration
}

func sftCommand() *cli.Command {
	s := &sftCmd{cfg: sft.DefaultConfig(), distTimeout: torchflag.DistTimeout}
	return app.Command(&cli.Command{
		Name:  "sft",
		Usage: "warm-start a policy by behaviour cloning of the scripted oracle or of given rollouts",
		Description: `Plays the task's questions with the scripted oracle against --index, replays each
trajectory through the agent protocol with the policy's tokenizer (so every turn's
context and response ids are exactly what a rollout would see and produce), and trains
the policy on the mean NLL of the response tokens only. With --rollouts instead of
--task and --index, it trains on the turns of a rollouts dataset as they were recorded
(trajectories you provide: a stronger policy's rollouts through 'mempo-rollout --engine
server', filtered as you see fit), whose ids must come from this policy's tokenizer.
The held-out loss is reported before and after. The output is a cached checkpoint artifact; a killed run resumes
from its last snapshot.`,
	}, s.flags(), s.run)
}

func (s *sftCmd) flags() *app.Flags {
	cfg, in := &s.cfg, &s.in
	return app.Bind(cfg, app.Unbound(sftOutFlag, app.ForceFlag, app.SeedFlag, app.ProgressFlag, app.LogLevelFlag, app.DebugFlag, app.TBDirFlag, app.TBStepFlag), []app.Flag{
		app.String(&in.Task, cli.StringFlag{Name: "task", Category: "Inputs", TakesFile: true, Usage: "task `DIR` written by 'mempo gen-task': its task.json regenerates the world the oracle knows (or --rollouts)"}),
		app.String(&in.Rollouts, cli.StringFlag{Name: "rollouts", Category: "Inputs", TakesFile: true, Usage: "rollouts dataset `DIR` to train on instead of the oracle of --task: every turn's response after its recorded context"}),
		app.String(&in.Prompts, cli.StringFlag{Name: "prompts", Category: "Inputs", TakesFile: true, Usage: "prompts dataset `DIR` to clone (default: the task's prompts-train)"}),
		app.String(&in.Index, cli.StringFlag{Name: "index", Category: "Inputs", TakesFile: true, Usage: "search index `DIR` ('mempo index' over the task's corpus.jsonl): the one the rollouts use, so observations match (with --task)"}),
		app.String(&in.Policy, cli.StringFlag{Name: "policy", Category: "Inputs", Required: true, TakesFile: true, Usage: "checkpoint `DIR` to train, with its tokenizer.json (e.g. from 'mempo init-model')"}),
		app.Load(&cfg.Protocol, cli.StringFlag{Name: "protocol", Category: "Inputs", TakesFile: true, Usage: "protocol description `FILE`; default: the built-in MemPO format"}, protocol.Load),
		torchflag.ChatTemplate(&cfg.ChatTemplate),
		app.Enum(&cfg.Context, cli.StringFlag{Name: "context", Category: "Episode", Usage: "context policy the rollouts will use: mempo, mem1 or full"}, protocol.ParseContextPolicy),
		app.Int(&cfg.MaxTurns, cli.IntFlag{Name: "max-turns", Category: "Episode", Usage: "turn budget of the oracle's episodes; its last turn always answers"}),
		app.Int(&cfg.RetrievalTopK, cli.IntFlag{Name: "retrieval-topk", Category: "Episode", Usage: "documents returned per search"}),
		app.Float64(&cfg.OracleDrop, cli.Float64Flag{Name: "oracle-drop", Category: "Oracle", Usage: "probability that the oracle leaves a found fact out of its next <mem> (the forgetting MemPO targets)"}),
		app.Float64(&cfg.OracleDistractor, cli.Float64Flag{Name: "oracle-distractor", Category: "Oracle", Usage: "probability that the oracle keeps a retrieved near-duplicate's value instead of the fact"}),
		app.Int(&cfg.Questions, cli.IntFlag{Name: "questions", Category: "Oracle", Usage: "clone only the first N prompts (default 0: all)"}),
		app.Float64(&cfg.HeldOut, cli.Float64Flag{Name: "held-out", Category: "Training", Usage: "fraction of trajectories kept out of training; their loss is reported before and after"}),
		app.Int(&cfg.Epochs, cli.IntFlag{Name: "epochs", Category: "Training", Usage: "passes over the training turns, each reshuffled with --seed"}),
		app.Int(&cfg.BatchTokens, cli.IntFlag{Name: "batch-tokens", Category: "Training", Usage: "rows × padded tokens of one optimizer step's batch"}),
		app.Float64(&cfg.ContextLossWeight, cli.Float64Flag{Name: "context-loss-weight", Category: "Training", Usage: "weight of the context tokens' NLL (prompt, earlier turns, observations) next to the response's 1; 0 trains on responses only. A tiny model trained from scratch learns the corpus and copying from it faster with a small weight"}),
		app.Bool(&cfg.SharePrefixes, cli.BoolFlag{Name: "share-prefixes", Category: "Training", Usage: "compute the prefixes a batch's turns share (the system prompt, a trajectory's question) once per pass, and with --context-loss-weight score them once, each score counting once per turn; gradients equal the unshared pass's to float rounding (not with --grad-checkpoint)"}),
		// Config.Validate checks the schedule's name.
		app.Enum(&cfg.Schedule, cli.StringFlag{Name: "schedule", Category: "Optimizer", Usage: "LR after warm-up: constant, or linear (decay to 0 at the last step)"}, nil),
		app.Int(&cfg.Procs, cli.IntFlag{Name: "procs", Category: "Runtime", Usage: "train with `N` processes on the CPU, each with --threads threads: every step's batch is dealt into N shares of about equal tokens whose gradients are added up (data parallel). On a small model two one-thread processes outrun one two-thread process; the result equals one process's to float rounding, so N is part of the cache key; 0 or 1: one process"}).Check(app.AtLeast(&cfg.Procs, 0)),
		app.Int(&s.snapshotEvery, cli.IntFlag{Name: "snapshot-every", Category: "Runtime", Usage: "also save a resumable snapshot every `N` steps; 0: at each epoch's end only"}).Check(app.AtLeast(&s.snapshotEvery, 0)),
	}, torchflag.AdamW(&cfg.AdamW), torchflag.Runtime(&cfg.Device, &cfg.DType, &cfg.Attention), torchflag.Memory(&cfg.GradCheckpoint, &s.deviceMemory),
		torchflag.Ranks(&cfg.WorldSize, &s.distTimeout))
}

// sftOutFlag is sft's --out, a checkpoint rather than a dataset.
var sftOutFlag = &cli.StringFlag{Name: app.OutFlag.Name, Category: "Output", TakesFile: true, Usage: "checkpoint `DIR` to write (required): HF layout plus trainer/optimizer.safetensors, trainer_state.json, _metrics.jsonl and oracle.jsonl"}

func (s *sftCmd) run(c *cli.Context) error {
	spec, err := app.StageSpec(c)
	if err != nil {
		return err
	}
	if !spec.Part.Whole() {
		return app.Usage(fmt.Errorf("array job index %s: sft is one training process and takes no part of a shard plan", spec.Part))
	}
	group, leave, err := torchflag.Join(&s.cfg.WorldSize, s.distTimeout, &spec)
	if err != nil {
		return err
	}
	defer leave()
	s.cfg.Group = group
	if err := s.cfg.Validate(); err != nil {
		return app.Usage(err)
	}
	_, err = sft.Run(c.Context, s.cfg, s.in, spec, train.WithSnapshotEvery(s.snapshotEvery),
		train.WithDeviceMemory(torchflag.Bytes(s.deviceMemory)))
	return err
}
