package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/mempo/mempo/cmd/internal/app"
	"github.com/mempo/mempo/cmd/internal/torchflag"
	"github.com/mempo/mempo/format"
	"github.com/mempo/mempo/jobs"
	"github.com/mempo/mempo/stages/eval"
	"github.com/mempo/mempo/stages/protocol"
	"github.com/mempo/mempo/stages/rollout"
	"github.com/mempo/mempo/stages/score"
	"github.com/mempo/mempo/stages/task"
)

var (
	evalPolicyFlag = &cli.StringSliceFlag{Name: "policy", Category: "Inputs", Required: true,
		Usage: "`NAME=DIR[@CONTEXT]`: a policy checkpoint to evaluate under a label, optionally with a context policy (mempo, mem1, full); repeat to compare"}
	evalTaskFlag  = &cli.StringFlag{Name: "task", Category: "Inputs", TakesFile: true, Usage: "task `DIR` from 'mempo gen-task': its test sets, and the facts behind each question for the retention figure"}
	evalTestFlag  = &cli.StringSliceFlag{Name: "test", Category: "Inputs", Usage: "`K=DIR`: a prompts dataset of K-objective questions (instead of, or besides, --task's test sets)"}
	evalIndexFlag = &cli.StringFlag{Name: "index", Category: "Inputs", Required: true, TakesFile: true, Usage: "BM25 index `DIR` to search"}
	evalProtoFlag = &cli.StringFlag{Name: "protocol", Category: "Inputs", TakesFile: true, Usage: "protocol description `FILE` the policies were trained with (default: the built-in MemPO format)"}
	evalNFlag     = &cli.IntFlag{Name: "n", Category: "Eval", Value: 1, Usage: "trajectories per question (1 with --temperature 0 is greedy)"}
	evalTempFlag  = &cli.Float64Flag{Name: "temperature", Category: "Eval", Value: 0, Usage: "sampling temperature; 0 is greedy"}
	evalTurnsFlag = &cli.IntFlag{Name: "max-turns", Category: "Eval", Value: 16, Usage: "turn budget per trajectory"}
	evalTokFlag   = &cli.IntFlag{Name: "max-new-tokens", Category: "Eval", Value: 128, Usage: "tokens generated per turn at most"}
	evalLimitFlag = &cli.IntFlag{Name: "limit", Category: "Eval", Usage: "questions per test set at most (default 0: all)"}
	evalPPSFlag   = &cli.IntFlag{Name: "prompts-per-shard", Category: "Eval", Value: 16, Usage: "questions generated together per shard"}
	evalNoRepFlag = &cli.BoolFlag{Name: "no-report", Category: "Output", Usage: "only roll out and score (cached under --out); leave the table and plots to a later call with every policy, so separate processes can evaluate policies in parallel"}
)

var evalCommand = &cli.Command{
	Name:  "eval",
	Usage: "roll out policies on test sets and report F1, EM, TT, PT, turns, invalid rate and retention per K",
	Description: `Each (policy, test set) pair is a cached rollout and score run under --out/<name>/k<K>/;
then results.md, results.csv, f1_vs_k.png and pt_vs_k.png are written to --out and the table
is printed. A rerun recomputes only what changed, so policies can be evaluated in
parallel processes with --no-report into one --out, then reported together by a
call naming them all (pipelines/mempo.mk does).`,
	Flags: append(app.Clone(app.OutFlag, app.ForceFlag, app.SeedFlag, app.ProgressFlag, app.LogLevelFlag),
		app.Clone(evalPolicyFlag, evalTaskFlag, evalTestFlag, evalIndexFlag, evalProtoFlag, evalNFlag, evalTempFlag,
			evalTurnsFlag, evalTokFlag, evalLimitFlag, evalPPSFlag, evalNoRepFlag, torchflag.Threads)...),
	Action: runEval,
}

type evalPolicy struct {
	name, dir string
	context   protocol.Policy
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
			c, err := protocol.ParsePolicy(ctx)
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
	if err := torchflag.Apply(c); err != nil {
		return err
	}
	policies, err := parsePolicies(c.StringSlice(evalPolicyFlag.Name))
	if err != nil {
		return err
	}
	sets, err := testSets(c)
	if err != nil {
		return err
	}
	var facts eval.Facts
	if dir := c.String(evalTaskFlag.Name); dir != "" {
		w, _, err := task.Load(dir)
		if err != nil {
			return err
		}
		facts = eval.TaskFacts(w)
	}
	out := spec.Out
	var rows []eval.Row
	for _, p := range policies {
		for _, set := range sets {
			run, err := evalOne(c, spec, p, set)
			if err != nil {
				return fmt.Errorf("eval %s on K=%d: %w", p.name, set.k, err)
			}
			row, err := eval.Summarize(run, facts)
			if err != nil {
				return err
			}
			rows = append(rows, row)
		}
	}
	if c.Bool(evalNoRepFlag.Name) {
		return nil
	}
	return report(c, out, rows)
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

func report(c *cli.Context, out string, rows []eval.Row) error {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	var md strings.Builder
	if err := eval.WriteMarkdown(&md, rows); err != nil {
		return err
	}
	if err := format.WriteFileAtomic(filepath.Join(out, "results.md"), []byte(md.String())); err != nil {
		return err
	}
	var csv strings.Builder
	if err := eval.WriteCSV(&csv, rows); err != nil {
		return err
	}
	if err := format.WriteFileAtomic(filepath.Join(out, "results.csv"), []byte(csv.String())); err != nil {
		return err
	}
	plots := []struct {
		file, title, y string
		metric         func(eval.Row) float64
	}{
		{"f1_vs_k.png", "F1 vs number of objectives", "F1", func(r eval.Row) float64 { return r.F1 }},
		{"pt_vs_k.png", "Peak tokens vs number of objectives", "PT (tokens)", func(r eval.Row) float64 { return r.PT }},
	}
	for _, p := range plots {
		if err := eval.PlotPNG(filepath.Join(out, p.file), p.title, "K", p.y, eval.ByK(rows, p.metric)); err != nil {
			return err
		}
	}
	fmt.Fprint(c.App.Writer, md.String())
	fmt.Fprintf(c.App.Writer, "\nwrote %s/results.md, results.csv, f1_vs_k.png, pt_vs_k.png\n", out)
	return nil
}
