// Package update is the command line of mempo-update, the update stage of a MemPO
// iteration (DESIGN.md §7): policy checkpoint + reference + rollouts, logprobs and
// advantages datasets → the next policy checkpoint (HF layout) with its optimizer and
// trainer state, by PPO in mini-batches with exact gradient accumulation. A killed update
// resumes from its last finished mini-batch and ends with the same weights.
package update

import (
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/mempo/mempo/cmd/internal/app"
	"github.com/mempo/mempo/cmd/internal/torchflag"
	stage "github.com/mempo/mempo/stages/update"
	"github.com/mempo/mempo/train"
	"github.com/mempo/mempo/train/ppo"
)

// App is mempo-update's command line: the app its main runs, and the mempo executable
// when invoked under the name mempo-update. A process that runs it calls
// dataparallel.ServeWorker first: '--procs N' starts its own executable as the workers.
func App() *cli.App {
	cmd := command{cfg: stage.DefaultConfig(), snapshotEvery: 1, distTimeout: torchflag.DistTimeout}
	return app.New("mempo-update", "train the policy by PPO on rollouts, log-probs and advantages: the next checkpoint", cmd.flags(), cmd.run)
}

// command is what mempo-update's flags resolve into.
type command struct {
	cfg stage.Config
	in  stage.Inputs
	// snapshotEvery is the update's resume granularity: a snapshot after every
	// mini-batch unless told otherwise, so a killed update loses at most one.
	snapshotEvery int
	// deviceMemory is --device-memory, in GiB.
	deviceMemory float64
	// distTimeout is --dist-timeout: how long the ranks wait for one another.
	distTimeout time.Duration
}

func (cmd *command) flags() *app.Flags {
	cfg, in, obj := &cmd.cfg, &cmd.in, &cmd.cfg.Objective
	return app.Bind(cfg, app.Unbound(outFlag, app.ForceFlag, app.SeedFlag, app.ProgressFlag, app.LogLevelFlag, app.DebugFlag, app.TBDirFlag, app.TBStepFlag), []app.Flag{
		app.String(&in.Policy, cli.StringFlag{Name: "policy", Category: "Inputs", Required: true, TakesFile: true, Usage: "policy checkpoint `DIR` to train (HF layout; its optimizer state, trainer/optimizer.safetensors or an older top-level optimizer.safetensors, continues when it comes from an earlier update)"}),
		app.String(&in.Ref, cli.StringFlag{Name: "ref", Category: "Inputs", Required: true, TakesFile: true, Usage: "frozen reference checkpoint `DIR`: the policy's architecture and vocabulary"}),
		app.String(&in.Rollouts, cli.StringFlag{Name: "rollouts", Category: "Inputs", Required: true, TakesFile: true, Usage: "rollouts dataset `DIR`: each turn is one training sample"}),
		app.String(&in.Logprobs, cli.StringFlag{Name: "logprobs", Category: "Inputs", Required: true, TakesFile: true, Usage: "logprobs dataset `DIR` of those rollouts (old and reference log-probs)"}),
		app.String(&in.Advantages, cli.StringFlag{Name: "advantages", Category: "Inputs", Required: true, TakesFile: true, Usage: "advantages dataset `DIR` of those rollouts (per-token advantages)"}),

		app.Float64(&obj.Clip.Low, cli.Float64Flag{Name: "clip-low", Category: "Loss", Usage: "PPO clip ε below: ratio clipped at 1−ε"}),
		app.Float64(&obj.Clip.High, cli.Float64Flag{Name: "clip-high", Category: "Loss", Usage: "PPO clip ε above: ratio clipped at 1+ε"}),
		app.Float64(&obj.Clip.DualC, cli.Float64Flag{Name: "dual-clip", Category: "Loss", Usage: "dual-clip constant c > 1 capping the loss of negative-advantage tokens at −A·c"}),
		app.Enum(&obj.KL, cli.StringFlag{Name: "kl", Category: "Loss", Usage: "KL estimator to the reference: k1, k2 or k3 (low_var_kl, clamped)"}, ppo.ParseKL),
		app.Float64(&obj.KLCoef, cli.Float64Flag{Name: "kl-coef", Category: "Loss", Usage: "weight β of the KL penalty; 0 turns it off (reference log-probs are then not needed)"}),
		app.Float64(&obj.EntropyCoef, cli.Float64Flag{Name: "entropy-coef", Category: "Loss", Usage: "weight of the entropy bonus (subtracted from the loss)"}),
		app.Enum(&obj.Agg, cli.StringFlag{Name: "agg", Category: "Loss", Usage: "loss aggregation over a mini-batch: token-mean, seq-mean-token-mean or seq-mean-token-sum"}, ppo.ParseAgg),
		app.Float64(&cfg.Temperature, cli.Float64Flag{Name: "temperature", Category: "Loss", Usage: "the rollouts' sampling temperature; divides the policy's logits (the log-probs must be scored at the same)"}),
		app.Int(&cfg.PPOEpochs, cli.IntFlag{Name: "ppo-epochs", Category: "Batching", Usage: "passes over the samples, each reshuffled with --seed"}),
		app.Int(&cfg.MiniBatches, cli.IntFlag{Name: "mini-batches", Category: "Batching", Usage: "mini-batches per epoch; one optimizer step each"}),
		app.Int(&cfg.MicroTokenBudget, cli.IntFlag{Name: "micro-token-budget", Category: "Batching", Usage: "rows × padded tokens of one forward/backward pass; gradients accumulate over a mini-batch's passes exactly (0: one pass per mini-batch)"}),
		app.Bool(&cfg.SharePrefixes, cli.BoolFlag{Name: "share-prefixes", Category: "Batching", Usage: "compute the context prefixes a micro-batch's samples share (a group's prompt, an earlier turn a context repeats) once per pass, with micro-batches cut in context order; gradients equal the unshared pass's to float rounding (not with --grad-checkpoint)"}),
		app.Int(&cfg.Procs, cli.IntFlag{Name: "procs", Category: "Runtime", Usage: "train with `N` processes on the CPU, each with --threads threads: every mini-batch's micro-batches are dealt among them by tokens and their gradients added up (data parallel). On a small model two one-thread processes outrun one two-thread process; the result equals one process's to float rounding, so N is part of the cache key; 0 or 1: one process"}).Check(app.AtLeast(&cfg.Procs, 0)),
		app.Int(&cmd.snapshotEvery, cli.IntFlag{Name: "snapshot-every", Category: "Runtime", Usage: "save a resumable snapshot after every `N` mini-batches and at each epoch's end; 0: at epoch ends only (a killed update resumes from the last one)"}).Check(app.AtLeast(&cmd.snapshotEvery, 0)),
	}, torchflag.AdamW(&cfg.AdamW), torchflag.Runtime(&cfg.Device, &cfg.DType, &cfg.Attention), torchflag.Memory(&cfg.GradCheckpoint, &cmd.deviceMemory),
		torchflag.Ranks(&cfg.WorldSize, &cmd.distTimeout))
}

// outFlag is the stage's --out, a checkpoint rather than a dataset.
var outFlag = &cli.StringFlag{Name: app.OutFlag.Name, Category: "Output", TakesFile: true, Usage: "checkpoint `DIR` to write (required): HF layout plus trainer/optimizer.safetensors, trainer_state.json, _metrics.jsonl; it is a checkpoint only once checkpoint.json exists"}

func (cmd *command) run(c *cli.Context) error {
	spec, err := app.StageSpec(c)
	if err != nil {
		return err
	}
	if !spec.Part.Whole() {
		return app.Usage(fmt.Errorf("array job index %s: an update is one optimizer process and takes no part of a shard plan", spec.Part))
	}
	group, leave, err := torchflag.Join(&cmd.cfg.WorldSize, cmd.distTimeout, &spec)
	if err != nil {
		return err
	}
	defer leave()
	cmd.cfg.Group = group
	if err := cmd.cfg.Validate(); err != nil {
		return app.Usage(err)
	}
	_, err = stage.Run(c.Context, cmd.cfg, cmd.in, spec, train.WithSnapshotEvery(cmd.snapshotEvery),
		train.WithDeviceMemory(torchflag.Bytes(cmd.deviceMemory)))
	return err
}
