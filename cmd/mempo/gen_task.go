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

// The world-size flags default to task.DefaultConfig, the demo world of DESIGN.md §8.
var (
	genTaskDefault = task.DefaultConfig()

	genTaskOutFlag = &cli.StringFlag{
		Name: app.OutFlag.Name, Category: "Output", TakesFile: true,
		Usage: "task `DIR` to write (required): corpus.jsonl, prompts-train/, prompts-test-k<K>/ and task.json",
	}

	genTaskPeopleFlag = &cli.IntFlag{
		Name: "people", Category: "World", Value: genTaskDefault.People,
		Usage: "fictional people (occupation, birth year, birth city, employer), before distractors",
	}
	genTaskCitiesFlag = &cli.IntFlag{
		Name: "cities", Category: "World", Value: genTaskDefault.Cities,
		Usage: "cities (country, founding year, mayor); at least --countries, since every country needs a capital",
	}
	genTaskCompaniesFlag = &cli.IntFlag{
		Name: "companies", Category: "World", Value: genTaskDefault.Companies,
		Usage: "companies (founding year, founder, home city)",
	}
	genTaskCountriesFlag = &cli.IntFlag{
		Name: "countries", Category: "World", Value: genTaskDefault.Countries,
		Usage: "countries (capital, independence year)",
	}
	genTaskTwinRateFlag = &cli.Float64Flag{
		Name: "twin-rate", Category: "World", Value: genTaskDefault.TwinRate,
		Usage: "probability that an entity gets a near-duplicate distractor document (similar name, other values)",
	}
	genTaskTwoHopRateFlag = &cli.Float64Flag{
		Name: "two-hop-rate", Category: "World", Value: genTaskDefault.TwoHopRate,
		Usage: "probability that an objective goes through a relation (\"the founder of X\") and needs two searches",
	}
	genTaskNoYearsFlag = &cli.BoolFlag{
		Name: "no-year-questions", Category: "Questions",
		Usage: "keep year facts in the documents but never ask for them (a tiny model copies names far better than digit-by-digit years)",
	}
	genTaskTrainKFlag = &cli.IntFlag{
		Name: "train-k", Category: "Questions", Value: genTaskDefault.TrainK,
		Usage: "objectives per training question (the paper trains on 2)",
	}
	genTaskTrainFlag = &cli.IntFlag{
		Name: "train", Category: "Questions", Value: genTaskDefault.Train,
		Usage: "training questions, written to DIR/prompts-train",
	}
	genTaskTestKFlag = &cli.StringFlag{
		Name: "test-k", Category: "Questions", Value: joinInts(genTaskDefault.TestK),
		Usage: "comma-separated objective counts of the test sets, each written to DIR/prompts-test-k<K>",
	}
	genTaskTestFlag = &cli.IntFlag{
		Name: "test", Category: "Questions", Value: genTaskDefault.Test,
		Usage: "questions per test set",
	}
)

var genTaskCommand = &cli.Command{
	Name:  "gen-task",
	Usage: "generate the synthetic multi-objective QA task: corpus and prompts datasets",
	Description: `Builds a seeded world of fictional people, cities, companies and countries and
writes the task directory --out:
  corpus.jsonl          one Search-R1 document {"id", "contents"} per entity,
                        near-duplicate distractors included (index it with 'mempo index')
  prompts-train/        prompts dataset of --train questions of --train-k objectives
  prompts-test-k<K>/    prompts dataset of --test questions per K in --test-k
  task.json             the resolved config, counts and dataset digests, written last
Everything is a function of --seed and the flags. Each prompts dataset is a cached
stage output, so a rerun with the same flags is a cache hit and a changed seed or
size recomputes.`,
	Flags: append(append([]cli.Flag{genTaskOutFlag}, app.Clone(app.ForceFlag, app.VerifyFlag, app.SeedFlag,
		app.ProgressFlag, app.LogLevelFlag, app.DebugFlag)...),
		genTaskPeopleFlag, genTaskCitiesFlag, genTaskCompaniesFlag, genTaskCountriesFlag,
		genTaskTwinRateFlag, genTaskTwoHopRateFlag, genTaskNoYearsFlag, genTaskTrainKFlag, genTaskTrainFlag,
		genTaskTestKFlag, genTaskTestFlag),
	Action: runGenTask,
}

func runGenTask(c *cli.Context) error {
	spec, err := app.StageSpec(c)
	if err != nil {
		return err
	}
	if spec.Seed < 0 {
		return fmt.Errorf("--seed %d: want a seed >= 0: %w", spec.Seed, app.ErrUsage)
	}
	testK, err := parseInts(c.String(genTaskTestKFlag.Name))
	if err != nil {
		return fmt.Errorf("--test-k %q: %v: want comma-separated integers, e.g. 2,4,6: %w", c.String(genTaskTestKFlag.Name), err, app.ErrUsage)
	}
	cfg := task.Config{
		Seed:            uint64(spec.Seed),
		People:          c.Int(genTaskPeopleFlag.Name),
		Cities:          c.Int(genTaskCitiesFlag.Name),
		Companies:       c.Int(genTaskCompaniesFlag.Name),
		Countries:       c.Int(genTaskCountriesFlag.Name),
		TwinRate:        c.Float64(genTaskTwinRateFlag.Name),
		TwoHopRate:      c.Float64(genTaskTwoHopRateFlag.Name),
		NoYearQuestions: c.Bool(genTaskNoYearsFlag.Name),
		TrainK:          c.Int(genTaskTrainKFlag.Name),
		Train:           c.Int(genTaskTrainFlag.Name),
		TestK:           testK,
		Test:            c.Int(genTaskTestFlag.Name),
	}
	s, err := gentask.Run(c.Context, cfg, spec.Out, spec)
	if err != nil {
		return err
	}
	fmt.Fprintf(spec.Stdout, "gen-task: %s: %d documents (%d distractors), corpus sha256 %.12s\n",
		spec.Out, s.Corpus.Docs, s.Distractors, s.Corpus.SHA256)
	return nil
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return nil, err
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
