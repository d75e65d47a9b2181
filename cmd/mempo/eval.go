package main

import (
	"context"
	"errors"

	"github.com/urfave/cli/v2"

	"github.com/mempo/mempo/agent/protocol"
	"github.com/mempo/mempo/cmd/internal/app"
	"github.com/mempo/mempo/cmd/internal/torchflag"
	"github.com/mempo/mempo/jobs"
	"github.com/mempo/mempo/stages/eval"
	"github.com/mempo/mempo/stages/rollout"
	"github.com/mempo/mempo/stages/score"
)

// evalCmd is what 'mempo eval' resolves its flags into.
type evalCmd struct {
	cfg eval.Config
	in  eval.Inputs
	// roll is how every policy is rolled out: the rollout stage's defaults with the
	// evaluation's sampling; each job's context policy comes from its --policy.
	roll rollout.Config
}

func evalCommand() *cli.Command {
	e := &evalCmd{cfg: eval.DefaultConfig(), roll: rollout.DefaultConfig()}
	s := eval.DefaultSampling()
	e.roll.N, e.roll.Temperature, e.roll.PromptsPerShard = s.N, s.Temperature, s.PromptsPerShard
	return app.Command(&cli.Command{
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
	}, e.flags(), e.run)
}

func (e *evalCmd) flags() *app.Flags {
	cfg, in, roll := &e.cfg, &e.in, &e.roll
	return app.Bind(cfg, app.Unbound(app.OutFlag, app.ForceFlag, app.SeedFlag, app.ProgressFlag, app.LogLevelFlag, app.TBDirFlag, app.TBStepFlag), []app.Flag{
		app.List(&in.Policies, cli.StringSliceFlag{Name: "policy", Category: "Inputs",
			Usage: "`NAME=DIR[@CONTEXT]`: a policy checkpoint to evaluate under a label, optionally with a context policy (mempo, mem1, full); repeat to compare. " +
				"With --from, a bare NAME: report only the policies named, in that order (default: every policy cached there)"}, eval.ParsePolicy),
		app.List(&in.From, cli.StringSliceFlag{Name: "from", Category: "Inputs",
			Usage: "`SEED=DIR`: the --out directory of an earlier 'mempo eval' run of one training seed; repeat for each seed. Rolls out nothing: reports the cached runs across the seeds"}, eval.ParseSeed),
		app.String(&in.Task, cli.StringFlag{Name: "task", Category: "Inputs", TakesFile: true, Usage: "task `DIR` from 'mempo gen-task': its test sets, and the facts behind each question for the retention figure"}),
		app.List(&in.Tests, cli.StringSliceFlag{Name: "test", Category: "Inputs", Usage: "`K=DIR`: a prompts dataset of K-objective questions (instead of, or besides, --task's test sets)"}, eval.ParseTestSet),
		app.String(&in.Index, cli.StringFlag{Name: "index", Category: "Inputs", TakesFile: true, Usage: "BM25 index `DIR` to search (or --retriever-url; one is required unless --from)"}),
		app.String(&in.RetrieverURL, cli.StringFlag{Name: "retriever-url", Category: "Inputs", Usage: "Search-R1 retrieval server `URL` (http://host:port or its /retrieve endpoint) to search instead of --index"}),
		app.Load(&roll.Protocol, cli.StringFlag{Name: "protocol", Category: "Inputs", TakesFile: true, Usage: "protocol description `FILE` the policies were trained with (default: the built-in MemPO format)"}, protocol.Load),
		torchflag.ChatTemplate(&roll.ChatTemplate),
		app.Int(&roll.N, cli.IntFlag{Name: "n", Category: "Eval", Usage: "trajectories per question (1 with --temperature 0 is greedy); a question's figures are the mean over its trajectories"}),
		app.Float64(&roll.Temperature, cli.Float64Flag{Name: "temperature", Category: "Eval", Usage: "sampling temperature; 0 is greedy"}),
		app.Int(&roll.MaxTurns, cli.IntFlag{Name: "max-turns", Category: "Eval", Usage: "turn budget per trajectory"}),
		app.Int(&roll.MaxNewTokens, cli.IntFlag{Name: "max-new-tokens", Category: "Eval", Usage: "tokens generated per turn at most"}),
		app.Int(&roll.PromptLimit, cli.IntFlag{Name: "limit", Category: "Eval", Usage: "questions per test set at most (default 0: all); every seed and policy must answer the same questions"}),
		app.Int(&roll.PromptsPerShard, cli.IntFlag{Name: "prompts-per-shard", Category: "Eval", Usage: "questions generated together per shard"}),
		app.Int(&cfg.Resamples, cli.IntFlag{Name: "bootstrap", Category: "Report", Usage: "bootstrap resamples `B` behind each 95% interval (drawn from --seed)"}),
		app.String(&cfg.Baseline, cli.StringFlag{Name: "baseline", Category: "Report", Usage: "policy `NAME` the others are compared with (default: grpo when present; none: no differences)"}),
		app.Bool(&cfg.NoReport, cli.BoolFlag{Name: "no-report", Category: "Output", Usage: "only roll out and score (cached under --out); leave the table and plots to a later call with every policy, so separate processes can evaluate policies in parallel"}),
		torchflag.DType(&roll.DType),
		torchflag.Attention(&roll.Attention),
		torchflag.Threads(),
	})
}

func (e *evalCmd) run(c *cli.Context) error {
	spec, err := app.StageSpec(c)
	if err != nil {
		return err
	}
	_, err = eval.Evaluate(c.Context, e.cfg, e.in, spec, eval.Steps{Rollout: e.rollout, Score: scoreRun})
	if errors.Is(err, eval.ErrConfig) {
		return app.Usage(err)
	}
	return err
}

// rollout is the rollout stage of an evaluation job: the evaluation's rollout settings
// under the job's context policy.
func (e *evalCmd) rollout(ctx context.Context, j eval.Job, spec jobs.Spec) error {
	cfg := e.roll
	cfg.Context, cfg.RetrieverURL = j.Policy.Context, j.RetrieverURL
	_, err := rollout.Run(ctx, cfg, rollout.Inputs{Prompts: j.Prompts, Policy: j.Policy.Dir, Index: j.Index}, spec)
	return err
}

// scoreRun is the score stage of an evaluation job, with the default reward.
func scoreRun(ctx context.Context, j eval.Job, spec jobs.Spec) error {
	_, err := score.Run(ctx, score.DefaultConfig(), score.Inputs{Rollouts: j.Rollouts, Prompts: j.Prompts}, spec)
	return err
}
