// Command mempo-update is the update stage of a MemPO iteration (DESIGN.md §7): policy
// checkpoint + reference + rollouts, logprobs and advantages datasets → the next policy
// checkpoint (HF layout) with its optimizer and trainer state, by PPO in mini-batches
// with exact gradient accumulation. A killed update resumes from its last finished
// mini-batch and ends with the same weights.
package main

import (
	"fmt"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/mempo/mempo/cmd/internal/app"
	"github.com/mempo/mempo/cmd/internal/torchflag"
	"github.com/mempo/mempo/stages/update"
	"github.com/mempo/mempo/train/ppo"
)

var def = update.DefaultConfig()

var (
	outFlag        = &cli.StringFlag{Name: app.OutFlag.Name, Category: "Output", TakesFile: true, Usage: "checkpoint `DIR` to write (required): HF layout plus optimizer.safetensors, trainer_state.json, metrics.jsonl; it is a checkpoint only once checkpoint.json exists"}
	policyFlag     = &cli.StringFlag{Name: "policy", Category: "Inputs", Required: true, TakesFile: true, Usage: "policy checkpoint `DIR` to train (HF layout; its optimizer.safetensors continues when it comes from an earlier update)"}
	refFlag        = &cli.StringFlag{Name: "ref", Category: "Inputs", Required: true, TakesFile: true, Usage: "frozen reference checkpoint `DIR`: the policy's architecture and vocabulary"}
	rolloutsFlag   = &cli.StringFlag{Name: "rollouts", Category: "Inputs", Required: true, TakesFile: true, Usage: "rollouts dataset `DIR`: each turn is one training sample"}
	logprobsFlag   = &cli.StringFlag{Name: "logprobs", Category: "Inputs", Required: true, TakesFile: true, Usage: "logprobs dataset `DIR` of those rollouts (old and reference log-probs)"}
	advantagesFlag = &cli.StringFlag{Name: "advantages", Category: "Inputs", Required: true, TakesFile: true, Usage: "advantages dataset `DIR` of those rollouts (per-token advantages)"}

	lrFlag       = &cli.Float64Flag{Name: "lr", Category: "Optimizer", Value: def.AdamW.LR, Usage: "AdamW learning rate (the paper's for 7B)"}
	warmupFlag   = &cli.Int64Flag{Name: "warmup-steps", Category: "Optimizer", Value: def.AdamW.WarmupSteps, Usage: "optimizer steps of linear LR warm-up from 0, counted over the checkpoint's lineage; constant after"}
	decayFlag    = &cli.Float64Flag{Name: "weight-decay", Category: "Optimizer", Value: def.AdamW.WeightDecay, Usage: "AdamW decoupled weight decay"}
	gradNormFlag = &cli.Float64Flag{Name: "max-grad-norm", Category: "Optimizer", Value: def.AdamW.MaxGradNorm, Usage: "clip the global gradient L2 norm to this; 0 disables clipping"}
	clipLowFlag  = &cli.Float64Flag{Name: "clip-low", Category: "Loss", Value: def.Objective.Clip.Low, Usage: "PPO clip ε below: ratio clipped at 1−ε"}
	clipHighFlag = &cli.Float64Flag{Name: "clip-high", Category: "Loss", Value: def.Objective.Clip.High, Usage: "PPO clip ε above: ratio clipped at 1+ε"}
	dualClipFlag = &cli.Float64Flag{Name: "dual-clip", Category: "Loss", Value: def.Objective.Clip.DualC, Usage: "dual-clip constant c > 1 capping the loss of negative-advantage tokens at −A·c"}
	klFlag       = &cli.StringFlag{Name: "kl", Category: "Loss", Value: string(def.Objective.KL), Usage: "KL estimator to the reference: k1, k2 or k3 (low_var_kl, clamped)"}
	klCoefFlag   = &cli.Float64Flag{Name: "kl-coef", Category: "Loss", Value: def.Objective.KLCoef, Usage: "weight β of the KL penalty; 0 turns it off (reference log-probs are then not needed)"}
	entropyFlag  = &cli.Float64Flag{Name: "entropy-coef", Category: "Loss", Value: def.Objective.EntropyCoef, Usage: "weight of the entropy bonus (subtracted from the loss)"}
	aggFlag      = &cli.StringFlag{Name: "agg", Category: "Loss", Value: string(def.Objective.Agg), Usage: "loss aggregation over a mini-batch: token-mean, seq-mean-token-mean or seq-mean-token-sum"}
	epochsFlag   = &cli.IntFlag{Name: "ppo-epochs", Category: "Batching", Value: def.PPOEpochs, Usage: "passes over the samples, each reshuffled with --seed"}
	miniFlag     = &cli.IntFlag{Name: "mini-batches", Category: "Batching", Value: def.MiniBatches, Usage: "mini-batches per epoch; one optimizer step each"}
	budgetFlag   = &cli.IntFlag{Name: "micro-token-budget", Category: "Batching", Value: def.MicroTokenBudget, Usage: "rows × padded tokens of one forward/backward pass; gradients accumulate over a mini-batch's passes exactly (0: one pass per mini-batch)"}
	tempFlag     = &cli.Float64Flag{Name: "temperature", Category: "Loss", Value: def.Temperature, Usage: "the rollouts' sampling temperature; divides the policy's logits (the log-probs must be scored at the same)"}
	deviceFlag   = &cli.StringFlag{Name: "device", Category: "Runtime", Value: def.Device, Usage: "where the policy trains: cpu, cuda or cuda:N"}
	dtypeFlag    = &cli.StringFlag{Name: "dtype", Category: "Runtime", Usage: "weight precision: float32, bfloat16 (with float32 master weights) or float16 (default: the checkpoint's)"}
	snapshotFlag = &cli.IntFlag{Name: "snapshot-every", Category: "Runtime", Value: 1, Usage: "save a resumable snapshot after every `N` mini-batches (a killed update resumes from the last one)"}
)

func main() {
	flags := append(app.Clone(outFlag, app.ForceFlag, app.SeedFlag, app.ProgressFlag, app.LogLevelFlag, app.DebugFlag), app.Clone(policyFlag, refFlag, rolloutsFlag, logprobsFlag, advantagesFlag,
		lrFlag, warmupFlag, decayFlag, gradNormFlag, clipLowFlag, clipHighFlag, dualClipFlag, klFlag, klCoefFlag,
		entropyFlag, aggFlag, epochsFlag, miniFlag, budgetFlag, tempFlag, deviceFlag, dtypeFlag, torchflag.Threads, snapshotFlag)...)
	os.Exit(app.Main(app.New("mempo-update", "train the policy by PPO on rollouts, log-probs and advantages: the next checkpoint", flags, run), os.Args))
}

func run(c *cli.Context) error {
	spec, err := app.StageSpec(c)
	if err != nil {
		return err
	}
	if !spec.Part.Whole() {
		return app.Usage(fmt.Errorf("array job index %s: an update is one optimizer process and takes no part of a shard plan", spec.Part))
	}
	cfg := def
	cfg.AdamW.LR, cfg.AdamW.WarmupSteps = c.Float64(lrFlag.Name), c.Int64(warmupFlag.Name)
	cfg.AdamW.WeightDecay, cfg.AdamW.MaxGradNorm = c.Float64(decayFlag.Name), c.Float64(gradNormFlag.Name)
	cfg.Objective.Clip.Low, cfg.Objective.Clip.High = c.Float64(clipLowFlag.Name), c.Float64(clipHighFlag.Name)
	cfg.Objective.Clip.DualC = c.Float64(dualClipFlag.Name)
	cfg.Objective.KLCoef, cfg.Objective.EntropyCoef = c.Float64(klCoefFlag.Name), c.Float64(entropyFlag.Name)
	cfg.PPOEpochs, cfg.MiniBatches, cfg.MicroTokenBudget = c.Int(epochsFlag.Name), c.Int(miniFlag.Name), c.Int(budgetFlag.Name)
	cfg.Temperature = c.Float64(tempFlag.Name)
	cfg.Device, cfg.DType = c.String(deviceFlag.Name), c.String(dtypeFlag.Name)
	if cfg.Objective.KL, err = ppo.ParseKL(c.String(klFlag.Name)); err != nil {
		return app.Usage(err)
	}
	if cfg.Objective.Agg, err = ppo.ParseAgg(c.String(aggFlag.Name)); err != nil {
		return app.Usage(err)
	}
	if err := cfg.Validate(); err != nil {
		return app.Usage(err)
	}
	if err := torchflag.Apply(c); err != nil {
		return err
	}
	in := update.Inputs{Policy: c.String(policyFlag.Name), Ref: c.String(refFlag.Name), Rollouts: c.String(rolloutsFlag.Name),
		Logprobs: c.String(logprobsFlag.Name), Advantages: c.String(advantagesFlag.Name)}
	_, err = update.Run(c.Context, cfg, in, spec, update.WithSnapshotEvery(c.Int(snapshotFlag.Name)))
	return err
}
