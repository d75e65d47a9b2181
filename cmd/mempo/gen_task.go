package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/mempo/mempo/agent/task"
	"github.com/mempo/mempo/cmd/internal/app"
	"github.com/mempo/mempo/stages/gentask"
)

// genTaskCmd is what 'mempo gen-task' resolves its flags into; the world-size flags
// default to task.DefaultConfig, the demo world of DESIGN.md §8.
type genTaskCmd struct{ cfg task.Config }

func genTaskCommand() *cli.Command {
	g := &genTaskCmd{cfg: task.DefaultConfig()}
	return app.Command(&cli.Command{
		Name:  "gen-task",
		Usage: "generate the synthetic multi-objective QA task: corpus and prompts datasets",
		Description: `Builds a seeded world of fictional people, cities, companies and countries and
writes the task directory --out:
  corpus.jsonl          one Search-R1 document {"id", "contents"} per entity,
                        near-duplicate distractors included (index it with 'mempo index')
  prompts-train/        prompts dataset of --train questions of --train-k objectives
                        (each up to --train-k-max)
  prompts-test-k<K>/    prompts dataset of --test questions per K in --test-k
  task.json             the resolved config, counts and dataset digests, written last
Everything is a function of --seed and the flags. Each prompts dataset is a cached
stage output, so a rerun with the same flags is a cache hit and a changed seed or
size recomputes.`,
	}, g.flags(), g.run)
}

func (g *genTaskCmd) flags() *app.Flags {
	cfg := &g.cfg
	return app.Bind(cfg, app.Unbound(genTaskOutFlag, app.ForceFlag, app.VerifyFlag, app.SeedFlag, app.ProgressFlag, app.LogLevelFlag, app.DebugFlag, app.TBDirFlag, app.TBStepFlag), []app.Flag{
		app.Int(&cfg.People, cli.IntFlag{Name: "people", Category: "World", Usage: "fictional people (occupation, birth year, birth city, employer), before distractors"}),
		app.Int(&cfg.Cities, cli.IntFlag{Name: "cities", Category: "World", Usage: "cities (country, founding year, mayor); at least --countries, since every country needs a capital"}),
		app.Int(&cfg.Companies, cli.IntFlag{Name: "companies", Category: "World", Usage: "companies (founding year, founder, home city)"}),
		app.Int(&cfg.Countries, cli.IntFlag{Name: "countries", Category: "World", Usage: "countries (capital, independence year)"}),
		app.Float64(&cfg.TwinRate, cli.Float64Flag{Name: "twin-rate", Category: "World", Usage: "probability that an entity gets a near-duplicate distractor document (similar name, other values)"}),
		app.Float64(&cfg.TwoHopRate, cli.Float64Flag{Name: "two-hop-rate", Category: "World", Usage: "probability that an objective goes through a relation (\"the founder of X\") and needs two searches"}),
		app.Bool(&cfg.NoYearQuestions, cli.BoolFlag{Name: "no-year-questions", Category: "Questions", Usage: "keep year facts in the documents but never ask for them (a tiny model copies names far better than digit-by-digit years)"}),
		app.Int(&cfg.TrainK, cli.IntFlag{Name: "train-k", Category: "Questions", Usage: "objectives per training question (the paper trains on 2)"}),
		app.Int(&cfg.TrainKMax, cli.IntFlag{Name: "train-k-max", Category: "Questions", Usage: "when above --train-k, each training question draws its objective count uniformly from --train-k..N: a mix where memory decides as well as where it barely matters (0: every question --train-k)"}),
		app.Int(&cfg.Train, cli.IntFlag{Name: "train", Category: "Questions", Usage: "training questions, written to DIR/prompts-train"}).Check(app.AtLeast(&cfg.Train, 1)),
		app.Text(&cfg.TestK, cli.StringFlag{Name: "test-k", Category: "Questions", Value: joinInts(cfg.TestK), Usage: "comma-separated objective counts of the test sets, each written to DIR/prompts-test-k<K>"}, parseInts),
		app.Int(&cfg.Test, cli.IntFlag{Name: "test", Category: "Questions", Usage: "questions per test set"}).Check(app.AtLeast(&cfg.Test, 1)),
	})
}

// genTaskOutFlag is gen-task's --out, a task directory rather than a dataset.
var genTaskOutFlag = &cli.StringFlag{Name: app.OutFlag.Name, Category: "Output", TakesFile: true, Usage: "task `DIR` to write (required): corpus.jsonl, prompts-train/, prompts-test-k<K>/ and task.json"}

func (g *genTaskCmd) run(c *cli.Context) error {
	spec, err := app.StageSpec(c)
	if err != nil {
		return err
	}
	if spec.Seed < 0 {
		return fmt.Errorf("--seed %d: want a seed >= 0: %w", spec.Seed, app.ErrUsage)
	}
	cfg := g.cfg
	cfg.Seed = uint64(spec.Seed)
	s, err := gentask.Run(c.Context, cfg, spec)
	if err != nil {
		return err
	}
	fmt.Fprintf(spec.Stdout, "gen-task: %s: %d documents (%d distractors), corpus sha256 %.12s\n",
		spec.Out, s.Corpus.Docs, s.Distractors, s.Corpus.SHA256)
	return nil
}

// parseInts reads --test-k's comma-separated list.
func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return nil, fmt.Errorf("%q: %w: want comma-separated integers, e.g. 2,4,6", s, err)
		}
		out = append(out, n)
	}
	return out, nil
}

func joinInts(ns []int) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}
