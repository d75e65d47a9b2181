// Package torchflag is the command-line glue of the binaries that run tensors: the
// libtorch runtime flags they share, the AdamW flags of the two training commands and
// the prompt flag of the commands that start episodes, each bound to the config field it
// sets, so that every command spells them alike.
package torchflag

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/mempo/mempo/cmd/internal/app"
	"github.com/mempo/mempo/jobs"
	"github.com/mempo/mempo/model/chat"
	"github.com/mempo/mempo/model/qwen2"
	"github.com/mempo/mempo/model/torch"
	"github.com/mempo/mempo/train"
	"github.com/mempo/mempo/train/collective"
)

// Runtime binds the runtime flags of a command that loads a policy: --device, --dtype,
// --attention and --threads.
func Runtime(device, dtype, attention *string) []app.Flag {
	return []app.Flag{Device(device), DType(dtype), Attention(attention), Threads()}
}

// Device binds --device to a stage's Device field. It is checked as the flags are
// resolved (from the command line, MEMPO_DEVICE or --config), before any input is
// opened: a typo is a usage error, and a CUDA device this binary cannot use (a CPU-only
// libtorch, no visible GPU, an index past the last) a failure saying which — except
// under --merge, which runs no model: the merge of GPU workers' parts passes their
// --device (part of the key each part is checked against) from a machine without one.
func Device(dst *string) app.Flag {
	return app.String(dst, cli.StringFlag{Name: "device", Category: "Runtime",
		Usage: "where the models run: cpu, cuda or cuda:N"}).Check(func() error { return CheckDevice(*dst) }).ThenWith(func(c *cli.Context) error {
		if c.Int(app.MergeFlag.Name) > 0 {
			return nil
		}
		_, err := torch.Device(*dst)
		return err
	})
}

// DType binds --dtype to a stage's DType field; "" keeps the checkpoint's precision.
func DType(dst *string) app.Flag {
	return app.String(dst, cli.StringFlag{Name: "dtype", Category: "Runtime",
		Usage: "weight precision: float32, bfloat16 (trained with float32 master weights) or float16 (default: the checkpoint's)"}).Check(func() error { return CheckDType(*dst) })
}

// Attention binds --attention to a stage's Attention field (qwen2.Options.Attention).
func Attention(dst *string) app.Flag {
	return app.String(dst, cli.StringFlag{Name: "attention", Category: "Runtime",
		Usage: "how passes of several tokens attend: auto (fused from 2048 x 2048 scores a row and head, where it is faster and holds a fraction of the memory), " +
			"eager (scores and probabilities materialised) or sdpa (libtorch's fused scaled_dot_product_attention); the kernels differ in the last bits (default: auto)"}).Check(func() error {
		if *dst == "auto" {
			*dst = "" // the default's one spelling, so the cache key does not tell them apart
		}
		if qwen2.CheckAttention(*dst) != nil {
			return fmt.Errorf("%q: want auto, eager or sdpa", *dst)
		}
		return nil
	})
}

// ChatTemplate binds --chat-template to a stage's ChatTemplate field: what renders an
// episode's first context (chat.ForCheckpoint).
func ChatTemplate(dst *string) app.Flag {
	return app.String(dst, cli.StringFlag{Name: "chat-template", Category: "Inputs",
		Usage: "what renders the first prompt: checkpoint (the policy's own Jinja chat_template of tokenizer_config.json, as transformers' apply_chat_template; " +
			"the protocol's chat glue, with a warning, when it has none) or protocol (always the protocol description's chat_template glue)"}).Check(func() error {
		if *dst == chat.FromCheckpoint {
			*dst = "" // the default's one spelling, so the cache key does not tell them apart
		}
		return chat.CheckMode(*dst)
	})
}

// CheckDevice accepts the device names torch.Device resolves: cpu, cuda and cuda:N.
func CheckDevice(s string) error {
	if s == "cpu" || s == "cuda" {
		return nil
	}
	if n, ok := strings.CutPrefix(s, "cuda:"); ok {
		if i, err := strconv.Atoi(n); err == nil && i >= 0 {
			return nil
		}
	}
	return fmt.Errorf("%q: want cpu, cuda or cuda:N", s)
}

// CheckDType accepts the weight precisions a Qwen2 checkpoint may be loaded in, and ""
// for the checkpoint's own.
func CheckDType(s string) error {
	switch s {
	case "", "float32", "bfloat16", "float16":
		return nil
	}
	return fmt.Errorf("%q: want float32, bfloat16 or float16", s)
}

// Threads binds --threads, which sets the intra-op thread count of the torch thread,
// where the stages' tensor work runs (torch.SetNumThreads), before any tensor work. It
// is no config field: it changes speed, and the products' last bits (a rollout's
// sampling log-probs; a token only where a draw lands that close to a boundary). Since the
// process keeps one OpenMP team, even the tiny preset decodes faster on two threads
// than on one (a demo rollout shard: 8.9-10.3 s against 13.9 s).
func Threads() app.Flag {
	n := new(int)
	return app.Int(n, cli.IntFlag{Name: "threads", Category: "Runtime",
		Usage: "libtorch intra-op threads; 0 keeps libtorch's choice (one per core)"}).Then(func() error {
		if *n == 0 {
			return nil
		}
		return app.Usage(torch.SetNumThreads(*n))
	})
}

// AdamW binds the optimizer flags that mempo-update and mempo sft share to their
// stage's AdamW settings; betas and eps keep their defaults (or a --config file's).
func AdamW(cfg *train.AdamWConfig) []app.Flag {
	return []app.Flag{
		app.Float64(&cfg.LR, cli.Float64Flag{Name: "lr", Category: "Optimizer",
			Usage: "AdamW learning rate"}),
		app.Int64(&cfg.WarmupSteps, cli.Int64Flag{Name: "warmup-steps", Category: "Optimizer",
			Usage: "optimizer steps of linear LR warm-up from 0, counted over the checkpoint's lineage"}),
		app.Float64(&cfg.WeightDecay, cli.Float64Flag{Name: "weight-decay", Category: "Optimizer",
			Usage: "AdamW decoupled weight decay"}),
		app.Float64(&cfg.MaxGradNorm, cli.Float64Flag{Name: "max-grad-norm", Category: "Optimizer",
			Usage: "clip the global gradient L2 norm to this; 0 disables clipping"}),
	}
}

// Memory binds the memory flags of the two training commands: --grad-checkpoint to the
// stage's GradCheckpoint field, and --device-memory, which is no config field (it
// decides whether a run starts, not what it computes), to *gib.
func Memory(checkpoint *bool, gib *float64) []app.Flag {
	return []app.Flag{
		app.Bool(checkpoint, cli.BoolFlag{Name: "grad-checkpoint", Category: "Memory",
			Usage: "recompute each decoder layer's activations (and the logits, chunk by chunk) in the backward pass instead of keeping them: " +
				"a pass then holds every layer's input, one layer's activations and one chunk's logits, for one more forward pass; gradients match to float32 rounding"}),
		app.Float64(gib, cli.Float64Flag{Name: "device-memory", Category: "Memory",
			Usage: "memory of the training device in `GiB`, which the memory estimate printed before training must fit in; " +
				"0: MemAvailable of /proc/meminfo on the CPU, unchecked on a GPU"}).Check(app.AtLeast(gib, 0)),
	}
}

// Bytes converts a --device-memory value in GiB to bytes.
func Bytes(gib float64) int64 { return int64(gib * (1 << 30)) }

// DistTimeout is --dist-timeout's default, which a command sets in its field.
const DistTimeout = 10 * time.Minute

// Ranks binds the flags of a training command run as several ranks: --world-size to
// the stage's WorldSize field (keyed: the sums differ from one process's in the last
// bits) and --dist-timeout, no config field, to *timeout.
func Ranks(world *int, timeout *time.Duration) []app.Flag {
	return []app.Flag{
		app.Int(world, cli.IntFlag{Name: "world-size", Category: "Runtime",
			Usage: "train as one of `N` ranks that a launcher started (torchrun, srun, a Kubernetes Job), data parallel over libtorch's c10d (TCPStore rendezvous at " +
				"MASTER_ADDR:MASTER_PORT, this process's RANK; Gloo on CPUs, NCCL on GPUs, where --device cuda takes the GPU of LOCAL_RANK): each rank runs its share of every step, the ranks sum their gradients, rank 0 writes the checkpoint. " +
				"0: the launcher's WORLD_SIZE, else 1; a value that differs from WORLD_SIZE is refused. Part of the cache key"}).Check(app.AtLeast(world, 0)),
		app.Text(timeout, cli.StringFlag{Name: "dist-timeout", Category: "Runtime", Value: DistTimeout.String(),
			Usage: "how long the rendezvous, and any step's exchange of gradients, waits for every rank: a rank that died or hangs fails the step on all ranks after it; " +
				"it must also cover what rank 0 does alone before the first step (resuming, SFT's held-out loss) (a Go `DURATION`)"},
			parsePositiveDuration),
	}
}

func parsePositiveDuration(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err == nil && d <= 0 {
		err = fmt.Errorf("want > 0")
	}
	return d, err
}

// JoinRanks joins the process group of the ranks a launcher started, as its variables
// (collective.FromEnv) describe them, for a command configured for world ranks (0: the
// launcher's count). It returns the world size to train with and the group, nil for a
// process alone. A count the launcher contradicts is refused before any work; the
// caller closes the group.
func JoinRanks(world int, timeout time.Duration) (int, *collective.Group, error) {
	cfg, launched, err := collective.FromEnv(os.Getenv)
	if err != nil {
		return 0, nil, fmt.Errorf("the launcher's rendezvous: %w", err)
	}
	switch {
	case !launched && world > 1:
		return 0, nil, fmt.Errorf("--world-size %d, but no launcher set %s, %s and %s (start the ranks with torchrun, srun or a Job that sets them): %w",
			world, collective.EnvWorld, collective.EnvRank, collective.EnvAddr, collective.ErrConfig)
	case !launched:
		return max(world, 1), nil, nil
	case world != 0 && world != cfg.World:
		return 0, nil, fmt.Errorf("--world-size %d, but the launcher started %s=%d ranks: %w", world, collective.EnvWorld, cfg.World, collective.ErrConfig)
	case cfg.World == 1:
		return 1, nil, nil
	}
	cfg.Timeout = timeout
	g, err := collective.Open(cfg)
	if err != nil {
		return 0, nil, err
	}
	return cfg.World, g, nil
}

// Join joins, for a training command, the ranks a launcher started: it sets *world to
// the count the stage keys (0 for a process alone, as before ranks existed) and returns
// the group to hand the stage, nil alone, and its closer. A rank other than 0 shows no
// progress and logs nothing to TensorBoard: rank 0's are the run's; --device cuda
// means the GPU of its local rank. A count the launcher contradicts is a usage error.
func Join(world *int, timeout time.Duration, spec *jobs.Spec) (train.Collective, func(), error) {
	n, g, err := JoinRanks(*world, timeout)
	if errors.Is(err, collective.ErrConfig) {
		return nil, nil, app.Usage(err)
	}
	if err != nil {
		return nil, nil, err
	}
	*world = n
	if n == 1 {
		*world = 0
	}
	if g == nil {
		return nil, func() {}, nil
	}
	if g.Rank() != 0 {
		spec.Board, spec.Progress = jobs.Board{}, jobs.ProgressNone
	}
	torch.UseLocalCUDA(g.LocalRank())
	return g, g.Close, nil
}
