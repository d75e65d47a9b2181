package main

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/mempo/mempo/agent/protocol"
	"github.com/mempo/mempo/cmd/internal/app"
	"github.com/mempo/mempo/cmd/internal/torchflag"
	"github.com/mempo/mempo/stages/sft"
)

var sftDefault = sft.DefaultConfig()

var (
	sftOutFlag       = &cli.StringFlag{Name: app.OutFlag.Name, Category: "Output", TakesFile: true, Usage: "checkpoint `DIR` to write (required): HF layout plus optimizer.safetensors, trainer_state.json, metrics.jsonl and oracle.jsonl"}
	sftTaskFlag      = &cli.StringFlag{Name: "task", Category: "Inputs", Required: true, TakesFile: true, Usage: "task `DIR` written by 'mempo gen-task': its task.json regenerates the world the oracle knows"}
	sftPromptsFlag   = &cli.StringFlag{Name: "prompts", Category: "Inputs", TakesFile: true, Usage: "prompts dataset `DIR` to clone (default: the task's prompts-train)"}
	sftIndexFlag     = &cli.StringFlag{Name: "index", Category: "Inputs", Required: true, TakesFile: true, Usage: "search index `DIR` ('mempo index' over the task's corpus.jsonl): the one the rollouts use, so observations match"}
	sftPolicyFlag    = &cli.StringFlag{Name: "policy", Category: "Inputs", Required: true, TakesFile: true, Usage: "checkpoint `DIR` to train, with its tokenizer.json (e.g. from 'mempo init-model')"}
	sftProtocolFlag  = &cli.StringFlag{Name: "protocol", Category: "Inputs", TakesFile: true, Usage: "protocol description `FILE`; default: the built-in MemPO format"}
	sftContextFlag   = &cli.StringFlag{Name: "context", Category: "Episode", Value: string(sftDefault.Context), Usage: "context policy the rollouts will use: mempo, mem1 or full"}
	sftTurnsFlag     = &cli.IntFlag{Name: "max-turns", Category: "Episode", Value: sftDefault.MaxTurns, Usage: "turn budget of the oracle's episodes; its last turn always answers"}
	sftTopKFlag      = &cli.IntFlag{Name: "retrieval-topk", Category: "Episode", Value: sftDefault.RetrievalTopK, Usage: "documents returned per search"}
	sftDropFlag      = &cli.Float64Flag{Name: "oracle-drop", Category: "Oracle", Value: sftDefault.OracleDrop, Usage: "probability that the oracle leaves a found fact out of its next <mem> (the forgetting MemPO targets)"}
	sftDistractFlag  = &cli.Float64Flag{Name: "oracle-distractor", Category: "Oracle", Value: sftDefault.OracleDistractor, Usage: "probability that the oracle keeps a retrieved near-duplicate's value instead of the fact"}
	sftQuestionsFlag = &cli.IntFlag{Name: "questions", Category: "Oracle", Usage: "clone only the first N prompts (default 0: all)"}
	sftHeldOutFlag   = &cli.Float64Flag{Name: "held-out", Category: "Training", Value: sftDefault.HeldOut, Usage: "fraction of trajectories kept out of training; their loss is reported before and after"}
	sftEpochsFlag    = &cli.IntFlag{Name: "epochs", Category: "Training", Value: sftDefault.Epochs, Usage: "passes over the training turns, each reshuffled with --seed"}
	sftLRFlag        = &cli.Float64Flag{Name: "lr", Category: "Training", Value: sftDefault.AdamW.LR, Usage: "AdamW learning rate"}
	sftWarmupFlag    = &cli.Int64Flag{Name: "warmup-steps", Category: "Training", Value: sftDefault.AdamW.WarmupSteps, Usage: "optimizer steps of linear LR warm-up from 0"}
	sftScheduleFlag  = &cli.StringFlag{Name: "schedule", Category: "Training", Value: string(sftDefault.Schedule), Usage: "LR after warm-up: constant, or linear (decay to 0 at the last step)"}
	sftDecayFlag     = &cli.Float64Flag{Name: "weight-decay", Category: "Training", Value: sftDefault.AdamW.WeightDecay, Usage: "AdamW decoupled weight decay"}
	sftGradNormFlag  = &cli.Float64Flag{Name: "max-grad-norm", Category: "Training", Value: sftDefault.AdamW.MaxGradNorm, Usage: "clip the global gradient L2 norm; 0 disables clipping"}
	sftBatchFlag     = &cli.IntFlag{Name: "batch-tokens", Category: "Training", Value: sftDefault.BatchTokens, Usage: "rows × padded tokens of one optimizer step's batch"}
	sftCtxLossFlag   = &cli.Float64Flag{Name: "context-loss-weight", Category: "Training", Value: sftDefault.ContextLossWeight, Usage: "weight of the context tokens' NLL (prompt, earlier turns, observations) next to the response's 1; 0 trains on responses only. A tiny model trained from scratch learns the corpus and copying from it faster with a small weight"}
	sftDeviceFlag    = &cli.StringFlag{Name: "device", Category: "Runtime", Value: sftDefault.Device, Usage: "where the policy trains: cpu, cuda or cuda:N"}
	sftDTypeFlag     = &cli.StringFlag{Name: "dtype", Category: "Runtime", Usage: "weight precision: float32, bfloat16 or float16 (default: the checkpoint's)"}
	sftSnapshotFlag  = &cli.IntFlag{Name: "snapshot-every", Category: "Runtime", Usage: "also save a resumable snapshot every `N` steps (default: at each epoch's end only)"}
)

var sftCommand = &cli.Command{
	Name:  "sft",
	Usage: "warm-start a policy by behaviour cloning of the scripted oracle",
	Description: `Plays the task's questions with the scripted oracle against --index, replays each
trajectory through the agent protocol with the policy's tokenizer (so every turn's
context and response ids are exactly what a rollout would see and produce), and trains
the policy on the mean NLL of the response tokens only. The held-out loss is reported
before and after. The output is a cached checkpoint artifact; a killed run resumes
from its last snapshot.`,
	Flags: append(append([]cli.Flag{sftOutFlag}, app.Clone(app.ForceFlag, app.SeedFlag, app.ProgressFlag, app.LogLevelFlag, app.DebugFlag)...),
		sftTaskFlag, sftPromptsFlag, sftIndexFlag, sftPolicyFlag, sftProtocolFlag, sftContextFlag, sftTurnsFlag,
		sftTopKFlag, sftDropFlag, sftDistractFlag, sftQuestionsFlag, sftHeldOutFlag, sftEpochsFlag, sftLRFlag,
		sftWarmupFlag, sftScheduleFlag, sftDecayFlag, sftGradNormFlag, sftBatchFlag, sftCtxLossFlag, sftDeviceFlag, sftDTypeFlag,
		torchflag.Threads, sftSnapshotFlag),
	Action: runSFT,
}

func runSFT(c *cli.Context) error {
	spec, err := app.StageSpec(c)
	if err != nil {
		return err
	}
	if !spec.Part.Whole() {
		return app.Usage(fmt.Errorf("array job index %s: sft is one training process and takes no part of a shard plan", spec.Part))
	}
	cfg := sftDefault
	if cfg.Context, err = protocol.ParseContextPolicy(c.String(sftContextFlag.Name)); err != nil {
		return app.Usage(err)
	}
	cfg.MaxTurns, cfg.RetrievalTopK = c.Int(sftTurnsFlag.Name), c.Int(sftTopKFlag.Name)
	cfg.OracleDrop, cfg.OracleDistractor = c.Float64(sftDropFlag.Name), c.Float64(sftDistractFlag.Name)
	cfg.Questions, cfg.HeldOut, cfg.Epochs = c.Int(sftQuestionsFlag.Name), c.Float64(sftHeldOutFlag.Name), c.Int(sftEpochsFlag.Name)
	cfg.AdamW.LR, cfg.AdamW.WarmupSteps = c.Float64(sftLRFlag.Name), c.Int64(sftWarmupFlag.Name)
	cfg.AdamW.WeightDecay, cfg.AdamW.MaxGradNorm = c.Float64(sftDecayFlag.Name), c.Float64(sftGradNormFlag.Name)
	cfg.Schedule, cfg.BatchTokens = sft.Schedule(c.String(sftScheduleFlag.Name)), c.Int(sftBatchFlag.Name)
	cfg.ContextLossWeight = c.Float64(sftCtxLossFlag.Name)
	cfg.Device, cfg.DType = c.String(sftDeviceFlag.Name), c.String(sftDTypeFlag.Name)
	if path := c.String(sftProtocolFlag.Name); path != "" {
		if cfg.Protocol, err = protocol.Load(path); err != nil {
			return err
		}
	}
	if err := cfg.Validate(); err != nil {
		return app.Usage(err)
	}
	if err := torchflag.Apply(c); err != nil {
		return err
	}
	in := sft.Inputs{Task: c.String(sftTaskFlag.Name), Prompts: c.String(sftPromptsFlag.Name),
		Index: c.String(sftIndexFlag.Name), Policy: c.String(sftPolicyFlag.Name)}
	_, err = sft.Run(c.Context, cfg, in, spec, sft.WithSnapshotEvery(c.Int(sftSnapshotFlag.Name)))
	return err
}
