package main

import (
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/mempo/mempo/agent/protocol"
	"github.com/mempo/mempo/agent/task"
	"github.com/mempo/mempo/cmd/internal/app"
	"github.com/mempo/mempo/cmd/internal/torchflag"
	"github.com/mempo/mempo/jobs"
	"github.com/mempo/mempo/stages/eval"
	"github.com/mempo/mempo/stages/rollout"
	"github.com/mempo/mempo/stages/score"
)

var (
	evalPolicyFlag = &cli.StringSliceFlag{Name: "policy", Category: "Inputs",
		Usage: "`NAME=DIR[@CONTEXT]`: a policy checkpoint to evaluate under a label, optionally with a context policy (mempo, mem1, full); repeat to compare. " +
			"With --from, a bare NAME: report only the policies named, in that order (default: every policy cached there)"}
	evalFromFlag = &cli.StringSliceFlag{Name: "from", Category: "Inputs",
		Usage: "`SEED=DIR`: the --out directory of an earlier 'mempo eval' run of one training seed; repeat for each seed. Rolls out nothing: reports the cached runs across the seeds"}
	evalTaskFlag  = &cli.StringFlag{Name: "task", Category: "Inputs", TakesFile: true, Usage: "task `DIR` from 'mempo gen-task': its test sets, and the facts behind each question for the retention figure"}
	evalTestFlag  = &cli.StringSliceFlag{Name: "test", Category: "Inputs", Usage: "`K=DIR`: a prompts dataset of K-objective questions (instead of, or besides, --task's test sets)"}
	evalIndexFlag = &cli.StringFlag{Name: "index", Category: "Inputs", TakesFile: true, Usage: "BM25 index `DIR` to search (required unless --from)"}
	evalProtoFlag = &cli.StringFlag{Name: "protocol", Category: "Inputs", TakesFile: true, Usage: "protocol description `FILE` the policies were trained with (default: the built-in MemPO format)"}
	evalNFlag     = &cli.IntFlag{Name: "n", Category: "Eval", Value: 1, Usage: "trajectories per question (1 with --temperature 0 is greedy); a question's figures are the mean over its trajectories"}
	evalTempFlag  = &cli.Float64Flag{Name: "temperature", Category: "Eval", Value: 0, Usage: "sampling temperature; 0 is greedy"}
	evalTurnsFlag = &cli.IntFlag{Name: "max-turns", Category: "Eval", Value: 16, Usage: "turn budget per trajectory"}
	evalTokFlag   = &cli.IntFlag{Name: "max-new-tokens", Category: "Eval", Value: 128, Usage: "tokens generated per turn at most"}
	evalLimitFlag = &cli.IntFlag{Name: "limit", Category: "Eval", Usage: "questions per test set at most (default 0: all); every seed and policy must answer the same questions"}
	evalPPSFlag   = &cli.IntFlag{Name: "prompts-per-shard", Category: "Eval", Value: 16, Usage: "questions generated together per shard"}
	evalBootFlag  = &cli.IntFlag{Name: "bootstrap", Category: "Report", Value: eval.DefaultConfig().Resamples,
		Usage: "bootstrap resamples `B` behind each 95% interval (drawn from --seed)"}
	evalBaseFlag = &cli.StringFlag{Name: "baseline", Category: "Report",
		Usage: "policy `NAME` the others are compared with (default: grpo when present; none: no differences)"}
	evalNoRepFlag = &cli.BoolFlag{Name: "no-report", Category: "Output", Usage: "only roll out and score (cached under --out); leave the table and plots to a later call with every policy, so separate processes can evaluate policies in parallel"}
)

var evalCommand = &cli.Command{
	Name:  "eval",
	Usage: "roll out policies on test sets and report F1, EM, success, TT, PT, turns, invalid rate and retention per K with 95% intervals",
	Description: `Each (policy, test set) pair is a cached rollout and score run under --out/<name>/k<K>/;
then the report is written to --out and its table printed. A rerun recomputes only what
changed, so policies can be evaluated in parallel processes with --no-report into one
--out, then reported together by a call naming them all (pipelines/mempo.mk does).

Seeds: train once per seed, evaluate each seed into its own --out, then
  mempo eval --from 1=DIR1 --from 2=DIR2 … --task TASK --out REPORT
reports every policy and test set cached in the DIRs (or only --policy NAME …) across
the seeds, rolling out nothing. Every seed must hold the same policies and test sets,
and all runs of one K the same questions (same task, same --limit). Without --from the
report covers one seed, the runs just made.

Figures: every metric is computed per question first (the mean over its --n
trajectories), then pooled over seeds and questions; invalid (invalid turns / turns)
and retention (found facts still in the final <mem> / found facts; needs --task) are
ratios of sums. Intervals are 95% percentile-bootstrap intervals from --bootstrap
resamples, each drawing the seeds with replacement and the questions with replacement
(one question draw shared by every seed and policy); with one seed only questions.
Differences against --baseline are paired: the same draws for both policies.

Report files:
  results.md   a table with one row per (policy, K): policy, K, seeds, questions, then
               F1, EM, success, TT, PT, turns, invalid, retention as "mean [lo, hi]";
               a table of differences vs the baseline for F1, EM, success, retention
               and PT as "+d [lo, hi]", "*" where the interval excludes 0; and a line
               stating the interval method (seeds, B, --seed).
  results.csv  long form, header policy,k,metric,baseline,mean,lo,hi,seeds,questions:
               one row per (policy, K, metric) with metric f1, em, success, tt, pt,
               turns, invalid or retention and an empty baseline; then, for each policy
               but the baseline, rows diff_<metric> = policy − baseline with the
               baseline named. mean, lo, hi are empty where a metric is unknown.
  f1_vs_k.png, pt_vs_k.png, success_vs_k.png, retention_vs_k.png (when known):
               each policy's mean against K with 95% error bars.`,
	Flags: append(app.Clone(app.OutFlag, app.ForceFlag, app.SeedFlag, app.ProgressFlag, app.LogLevelFlag),
		app.Clone(evalPolicyFlag, evalFromFlag, evalTaskFlag, evalTestFlag, evalIndexFlag, evalProtoFlag, evalNFlag, evalTempFlag,
			evalTurnsFlag, evalTokFlag, evalLimitFlag, evalPPSFlag, evalBootFlag, evalBaseFlag, evalNoRepFlag, torchflag.Threads)...),
	Action: runEval,
}

type evalPolicy struct {
	name, dir string
	context   protocol.ContextPolicy
}

func parsePolicies(specs []string) ([]evalPolicy, error) {
	var out []evalPolicy
	for _, s := range specs {
		name, rest, ok := strings.Cut(s, "=")
		if !ok || name == "" || rest == "" {
			return nil, app.Usage(fmt.Errorf("--policy %q: want NAME=DIR[@CONTEXT]", s))
		}
		p := evalPolicy{name: name, dir: rest, context: protocol.Mempo}
		if dir, ctx, ok := strings.Cut(rest, "@"); ok {
			c, err := protocol.ParseContextPolicy(ctx)
			if err != nil {
				return nil, app.Usage(fmt.Errorf("--policy %q: %w", s, err))
			}
			p.dir, p.context = dir, c
		}
		out = append(out, p)
	}
	return out, nil
}

type testSet struct {
	k   int
	dir string
}

func testSets(c *cli.Context) ([]testSet, error) {
	var sets []testSet
	if dir := c.String(evalTaskFlag.Name); dir != "" {
		_, sum, err := task.Load(dir)
		if err != nil {
			return nil, err
		}
		for _, d := range sum.Datasets {
			if d.Split == "test" {
				sets = append(sets, testSet{k: d.K, dir: filepath.Join(dir, d.Dir)})
			}
		}
	}
	for _, s := range c.StringSlice(evalTestFlag.Name) {
		k, dir, ok := strings.Cut(s, "=")
		n, err := strconv.Atoi(k)
		if !ok || err != nil || n < 1 {
			return nil, app.Usage(fmt.Errorf("--test %q: want K=DIR with K >= 1", s))
		}
		sets = append(sets, testSet{k: n, dir: dir})
	}
	if len(sets) == 0 {
		return nil, app.Usage(fmt.Errorf("no test sets: give --task or --test K=DIR"))
	}
	return sets, nil
}

func runEval(c *cli.Context) error {
	spec, err := app.StageSpec(c)
	if err != nil {
		return err
	}
	cfg := eval.Config{Resamples: c.Int(evalBootFlag.Name), Seed: spec.Seed, Baseline: c.String(evalBaseFlag.Name)}
	if cfg.Resamples < 1 {
		return app.Usage(fmt.Errorf("--bootstrap %d: want at least 1 resample", cfg.Resamples))
	}
	var facts eval.Facts
	if dir := c.String(evalTaskFlag.Name); dir != "" {
		w, _, err := task.Load(dir)
		if err != nil {
			return err
		}
		facts = eval.TaskFacts(w)
	}
	if from := c.StringSlice(evalFromFlag.Name); len(from) > 0 {
		if c.Bool(evalNoRepFlag.Name) {
			return app.Usage(fmt.Errorf("--no-report with --from: --from only reports"))
		}
		seeds, err := parseFrom(from)
		if err != nil {
			return err
		}
		names, err := policyNames(c.StringSlice(evalPolicyFlag.Name))
		if err != nil {
			return err
		}
		if seeds, err = eval.Discover(seeds, names); err != nil {
			return err
		}
		return report(c, spec.Out, seeds, facts, cfg)
	}

	if err := torchflag.Apply(c); err != nil {
		return err
	}
	policies, err := parsePolicies(c.StringSlice(evalPolicyFlag.Name))
	if err != nil {
		return err
	}
	if len(policies) == 0 {
		return app.Usage(fmt.Errorf("no policies: give --policy NAME=DIR, or --from SEED=DIR to report earlier runs"))
	}
	if c.String(evalIndexFlag.Name) == "" {
		return app.Usage(fmt.Errorf("--index is required to roll out (or --from SEED=DIR to report earlier runs)"))
	}
	sets, err := testSets(c)
	if err != nil {
		return err
	}
	var runs []eval.Run
	for _, p := range policies {
		for _, set := range sets {
			run, err := evalOne(c, spec, p, set)
			if err != nil {
				return fmt.Errorf("eval %s on K=%d: %w", p.name, set.k, err)
			}
			runs = append(runs, run)
		}
	}
	if c.Bool(evalNoRepFlag.Name) {
		return nil
	}
	seed := eval.Seed{Label: strconv.FormatInt(spec.Seed, 10), Dir: spec.Out, Runs: runs}
	return report(c, spec.Out, []eval.Seed{seed}, facts, cfg)
}

// parseFrom reads the --from SEED=DIR values.
func parseFrom(specs []string) ([]eval.Seed, error) {
	var seeds []eval.Seed
	seen := map[string]bool{}
	for _, s := range specs {
		label, dir, ok := strings.Cut(s, "=")
		if !ok || label == "" || dir == "" {
			return nil, app.Usage(fmt.Errorf("--from %q: want SEED=DIR", s))
		}
		if seen[label] {
			return nil, app.Usage(fmt.Errorf("--from %q: seed %s given twice", s, label))
		}
		seen[label] = true
		seeds = append(seeds, eval.Seed{Label: label, Dir: dir})
	}
	return seeds, nil
}

// policyNames reads --policy as bare names, the form it takes with --from.
func policyNames(specs []string) ([]string, error) {
	for _, s := range specs {
		if s == "" || strings.ContainsAny(s, "=@/") {
			return nil, app.Usage(fmt.Errorf("--policy %q with --from: want a bare NAME of a policy cached in every seed's DIR", s))
		}
	}
	return specs, nil
}

// evalOne rolls policy p out on one test set and scores it, both cached under out.
func evalOne(c *cli.Context, base jobs.Spec, p evalPolicy, set testSet) (eval.Run, error) {
	dir := filepath.Join(base.Out, p.name, fmt.Sprintf("k%d", set.k))
	run := eval.Run{Label: p.name, K: set.k, Rollouts: filepath.Join(dir, "rollouts"), Scores: filepath.Join(dir, "scores")}
	cfg := rollout.DefaultConfig()
	cfg.N, cfg.Context, cfg.Temperature = c.Int(evalNFlag.Name), p.context, c.Float64(evalTempFlag.Name)
	cfg.MaxTurns, cfg.MaxNewTokens = c.Int(evalTurnsFlag.Name), c.Int(evalTokFlag.Name)
	cfg.PromptLimit, cfg.PromptsPerShard = c.Int(evalLimitFlag.Name), c.Int(evalPPSFlag.Name)
	if path := c.String(evalProtoFlag.Name); path != "" {
		p, err := protocol.Load(path)
		if err != nil {
			return run, err
		}
		cfg.Protocol = p
	}
	spec := base
	spec.Out = run.Rollouts
	in := rollout.Inputs{Prompts: set.dir, Policy: p.dir, Index: c.String(evalIndexFlag.Name)}
	if _, err := rollout.Run(c.Context, cfg, in, spec); err != nil {
		return run, err
	}
	spec = base
	spec.Out = run.Scores
	_, err := score.Run(c.Context, score.DefaultConfig(), score.Inputs{Rollouts: run.Rollouts, Prompts: set.dir}, spec)
	return run, err
}

// report pairs the seeds' runs, bootstraps them, writes the report files into out and
// prints the tables.
func report(c *cli.Context, out string, seeds []eval.Seed, facts eval.Facts, cfg eval.Config) error {
	exp, err := eval.Collect(seeds, facts)
	if err != nil {
		return err
	}
	rep, err := exp.Report(cfg)
	if err != nil {
		if errors.Is(err, eval.ErrMissing) && cfg.Baseline != "" {
			return app.Usage(err)
		}
		return err
	}
	files, err := eval.WriteReport(out, rep)
	if err != nil {
		return err
	}
	if err := rep.WriteMarkdown(c.App.Writer); err != nil {
		return err
	}
	fmt.Fprintf(c.App.Writer, "\nwrote %s/%s\n", out, strings.Join(files, ", "))
	return nil
}
