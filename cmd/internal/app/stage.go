package app

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"reflect"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"
	"golang.org/x/term"

	"github.com/mempo/mempo/jobs"
)

// The flags every stage binary takes, resolved by StageSpec.
var (
	OutFlag = &cli.StringFlag{
		Name: "out", Category: "Output",
		Usage: "dataset `DIR` to write (required); a directory is a dataset only once its _manifest.json exists",
	}
	ForceFlag = &cli.BoolFlag{
		Name: "force", Category: "Output",
		Usage: "recompute even when --out already holds this exact output (a cache hit)",
	}
	VerifyFlag = &cli.BoolFlag{
		Name: "verify", Category: "Output",
		Usage: "on a cache hit, recompute beside it and fail if any shard's digest differs",
	}
	SeedFlag = &cli.Int64Flag{
		Name: "seed", Category: "Stage", Value: 1,
		Usage: "random seed; the same seed, config and inputs give the same bytes",
	}
	ShardFlag = &cli.StringFlag{
		Name: "shard", Category: "Scale-out",
		Usage: "compute only part `i/N` of the shard plan, into DIR/_parts/i-of-N; " +
			"without it, JOB_COMPLETION_INDEX or SLURM_ARRAY_TASK_ID give i and --shard-count gives N",
	}
	ShardCountFlag = &cli.IntFlag{
		Name: "shard-count", Category: "Scale-out",
		Usage: "number of parts `N` when i comes from JOB_COMPLETION_INDEX or SLURM_ARRAY_TASK_ID (Slurm defaults to SLURM_ARRAY_TASK_COUNT)",
	}
	MergeFlag = &cli.IntFlag{
		Name: "merge", Category: "Scale-out",
		Usage: "instead of computing, build --out from its `N` parts written by --shard i/N runs",
	}
	ProgressFlag = &cli.StringFlag{
		Name: "progress", Category: "Logging", Value: "auto",
		Usage: "progress display: auto (a bar on a terminal, plain lines otherwise), bar, plain or none",
	}
	LogLevelFlag = &cli.StringFlag{
		Name: "log-level", Category: "Logging", Value: "info",
		Usage: "structured log level on stderr: debug, info, warn or error",
	}
	DebugFlag = &cli.StringFlag{
		Name: "debug", Category: "Logging",
		Usage: "comma-separated debug switches: keyhash prints the cache key's preimage",
	}
	// TBDirFlag and TBStepFlag say where the stage's metrics also go (jobs.Board). They
	// change where metrics are logged, not what is computed: not part of the cache key.
	TBDirFlag = &cli.StringFlag{
		Name: "tb-dir", Category: "Logging", TakesFile: true,
		Usage: "TensorBoard log `DIR`: the metrics of the output, computed or cached, also go there as an event file, " +
			"tagged <stage>/<metric> at step --tb-step (a checkpoint's per-optimizer-step figures as <stage>/step/<field>); " +
			"a cache hit writes them only when DIR has none of that stage, step and output",
	}
	TBStepFlag = &cli.Int64Flag{
		Name: "tb-step", Category: "Logging",
		Usage: "step `N` the metrics are logged at in --tb-dir: the RL iteration (pipelines/rl.mk passes it)",
	}
)

// StageFlags returns copies of the common stage flags for one app, which StageSpec
// reads. urfave/cli writes parse state (an environment value, HasBeenSet) into the flag
// values themselves, so each app gets its own copies and the package values stay
// pristine templates.
func StageFlags() []Flag {
	return Unbound(OutFlag, ForceFlag, VerifyFlag, SeedFlag, ShardFlag, ShardCountFlag,
		MergeFlag, ProgressFlag, LogLevelFlag, DebugFlag, TBDirFlag, TBStepFlag)
}

// Clone returns shallow copies of flags, for the reason StageFlags gives.
func Clone(flags ...cli.Flag) []cli.Flag {
	out := make([]cli.Flag, len(flags))
	for i, f := range flags {
		v := reflect.ValueOf(f)
		c := reflect.New(v.Type().Elem())
		c.Elem().Set(v.Elem())
		out[i] = c.Interface().(cli.Flag)
	}
	return out
}

// StageSpec resolves the common stage flags into the runtime half of a jobs.Spec; the
// stage fills in what it computes (name, kind, config, inputs, plan). Invocation
// mistakes come back wrapped in ErrUsage.
func StageSpec(c *cli.Context) (jobs.Spec, error) {
	stdout, stderr := c.App.Writer, errWriter(c)
	if stdout == nil {
		stdout = os.Stdout
	}
	if c.Args().Present() {
		return jobs.Spec{}, fmt.Errorf("unexpected argument %q: a stage takes only flags: %w", c.Args().First(), ErrUsage)
	}
	spec := jobs.Spec{
		Out:    c.String(OutFlag.Name),
		Force:  c.Bool(ForceFlag.Name),
		Verify: c.Bool(VerifyFlag.Name),
		Seed:   c.Int64(SeedFlag.Name),
		Merge:  c.Int(MergeFlag.Name),
		Stdout: stdout,
	}
	if spec.Out == "" {
		return jobs.Spec{}, fmt.Errorf("--out is required (or %s, or \"out\" in --config): %w", EnvName(OutFlag.Name), ErrUsage)
	}
	if spec.Merge < 0 {
		return jobs.Spec{}, fmt.Errorf("--merge %d: want a part count >= 1: %w", spec.Merge, ErrUsage)
	}
	spec.Board = jobs.Board{Dir: c.String(TBDirFlag.Name), Step: c.Int64(TBStepFlag.Name)}
	if spec.Board.Step < 0 {
		return jobs.Spec{}, fmt.Errorf("--tb-step %d: want an iteration >= 0: %w", spec.Board.Step, ErrUsage)
	}
	var err error
	if spec.Part, err = resolvePart(c, os.LookupEnv); err != nil {
		return jobs.Spec{}, err
	}
	if spec.Progress, err = resolveProgress(c.String(ProgressFlag.Name), stderr); err != nil {
		return jobs.Spec{}, fmt.Errorf("--progress: %w", usage(err))
	}
	spec.ProgressOut = stderr
	if spec.Log, spec.KeyDebug, err = Logging(c); err != nil {
		return jobs.Spec{}, err
	}
	return spec, nil
}

// Logging resolves --log-level and --debug: the structured logger on stderr, and the
// writer the cache key's preimage goes to (nil unless --debug keyhash).
func Logging(c *cli.Context) (*slog.Logger, io.Writer, error) {
	stderr := errWriter(c)
	var level slog.Level
	if err := level.UnmarshalText([]byte(c.String(LogLevelFlag.Name))); err != nil {
		return nil, nil, fmt.Errorf("--log-level %q: want debug, info, warn or error: %w", c.String(LogLevelFlag.Name), ErrUsage)
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	var keyDebug io.Writer
	for _, sw := range strings.Split(c.String(DebugFlag.Name), ",") {
		switch strings.TrimSpace(sw) {
		case "":
		case "keyhash":
			keyDebug = stderr
		default:
			return nil, nil, fmt.Errorf("--debug %q: unknown switch %q, want keyhash: %w", c.String(DebugFlag.Name), sw, ErrUsage)
		}
	}
	return log, keyDebug, nil
}

// errWriter is where logs, progress and debug output go.
func errWriter(c *cli.Context) io.Writer {
	if c.App.ErrWriter != nil {
		return c.App.ErrWriter
	}
	return os.Stderr
}

func usage(err error) error { return fmt.Errorf("%w: %w", err, ErrUsage) }

// resolveProgress maps --progress to a mode; auto is a bar only when w is a terminal.
func resolveProgress(s string, w io.Writer) (jobs.Progress, error) {
	if s != "auto" {
		return jobs.ParseProgress(s)
	}
	if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		return jobs.ProgressBar, nil
	}
	return jobs.ProgressPlain, nil
}

// resolvePart picks the part this process computes: --shard i/N, else an array job's
// index variable (Kubernetes Indexed Jobs set JOB_COMPLETION_INDEX, Slurm arrays
// SLURM_ARRAY_TASK_ID, which counts from SLURM_ARRAY_TASK_MIN) with the count from
// --shard-count or SLURM_ARRAY_TASK_COUNT; else the whole plan.
func resolvePart(c *cli.Context, lookup func(string) (string, bool)) (jobs.Part, error) {
	if s := c.String(ShardFlag.Name); s != "" {
		p, err := jobs.ParsePart(s)
		if err != nil {
			return jobs.Part{}, fmt.Errorf("--shard: %w", usage(err))
		}
		return p, nil
	}
	count := c.Int(ShardCountFlag.Name)
	for _, v := range []string{"JOB_COMPLETION_INDEX", "SLURM_ARRAY_TASK_ID"} {
		idx, ok := lookup(v)
		if !ok || idx == "" {
			continue
		}
		i, err := strconv.Atoi(idx)
		if err != nil {
			return jobs.Part{}, fmt.Errorf("%s=%q: want an integer index: %w", v, idx, ErrUsage)
		}
		if v == "SLURM_ARRAY_TASK_ID" {
			if min, ok := lookup("SLURM_ARRAY_TASK_MIN"); ok {
				m, err := strconv.Atoi(min)
				if err != nil {
					return jobs.Part{}, fmt.Errorf("SLURM_ARRAY_TASK_MIN=%q: want an integer: %w", min, ErrUsage)
				}
				i -= m
			}
			if n, ok := lookup("SLURM_ARRAY_TASK_COUNT"); ok && count == 0 {
				count, _ = strconv.Atoi(n)
			}
		}
		if count < 1 {
			return jobs.Part{}, fmt.Errorf("%s=%s gives the part index but not the count: pass --shard-count N (or %s): %w",
				v, idx, EnvName(ShardCountFlag.Name), ErrUsage)
		}
		p, err := jobs.ParsePart(fmt.Sprintf("%d/%d", i, count))
		if err != nil {
			return jobs.Part{}, fmt.Errorf("%s=%s with --shard-count %d: %w", v, idx, count, usage(err))
		}
		return p, nil
	}
	if count != 0 {
		return jobs.Part{}, fmt.Errorf("--shard-count %d without a part index: use --shard i/N, or run as an array job: %w", count, ErrUsage)
	}
	return jobs.Part{}, nil
}
