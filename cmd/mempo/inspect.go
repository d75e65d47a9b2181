package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/urfave/cli/v2"

	"github.com/mempo/mempo/audit"
	"github.com/mempo/mempo/cmd/internal/app"
)

// inspectCmd is what 'mempo inspect' resolves its flags into.
type inspectCmd struct {
	head int // first rows shown; audit.Inspect has no default of its own
	json bool
	// turns and topMemories select the memory-drift audits instead of the summary.
	turns       bool
	topMemories int
}

func inspectCommand() *cli.Command {
	in := &inspectCmd{head: 3}
	return app.Command(&cli.Command{
		Name:      "inspect",
		Usage:     "describe a dataset: kind, schema, manifest, per-column statistics, first rows",
		ArgsUsage: "DIR [DIR...]",
		Description: `Reads the dataset directory DIR (its _manifest.json and every shard it lists;
a directory without a manifest is not a dataset). Each shard is checked against
the manifest's sha256 first. Statistics cover every row: min/max/mean of numeric
columns, length min/max/mean and element statistics of list columns, NaN counts,
and distinct counts of strings.

--turns audits the turn format of rollouts datasets, one line per DIR (give
several, e.g. every iteration and evaluation cell of a run): invalid turns by
where the response first leaves the format (no-mem-open, mem-unclosed, no-think,
think-unclosed, no-action, search-unclosed, answer-unclosed, text-after-action,
empty-query), trajectories with an invalid turn, those that never return to a
valid turn, the kind of each trajectory's first invalid turn, and the turns after
an invalid turn: how many open a memory and how many are valid.

--top-memories N lists the N memories of an advantages dataset with the largest
memory advantage (N < 0: the smallest), with their form: memory reward, P_mem,
gold answers held, supporting facts held (where the
prompts carry them), span length and end, the turn's action or failure kind, and
any tags or chat markers inside the memory. The rollouts and logprobs are the
ones its manifest names (or the directories of those names beside DIR).`,
	}, in.flags(), in.run)
}

func (in *inspectCmd) flags() *app.Flags {
	return app.Bind(nil, []app.Flag{
		app.Int(&in.head, cli.IntFlag{Name: "head", Category: "Inspect", Usage: "number of first rows to show"}),
		app.Bool(&in.json, cli.BoolFlag{Name: "json", Category: "Inspect", Usage: "print the summary as one JSON object instead of text"}),
		app.Bool(&in.turns, cli.BoolFlag{Name: "turns", Category: "Audit", Usage: "audit the turn format of rollouts datasets: invalid turns by kind, first failures, recovery (one line per DIR)"}),
		app.Int(&in.topMemories, cli.IntFlag{Name: "top-memories", Category: "Audit", Usage: "list the `N` memories of an advantages dataset with the largest memory advantage and their form (N < 0: the smallest); 0 is off"}),
	})
}

func (in *inspectCmd) run(c *cli.Context) error {
	if in.turns && in.topMemories != 0 {
		return app.Usage(errors.New("inspect: --turns and --top-memories are two audits; give one"))
	}
	if in.turns {
		return in.runTurns(c)
	}
	if in.topMemories != 0 {
		return in.runTopMemories(c)
	}
	if c.NArg() != 1 {
		return app.Usage(errors.New("inspect: want exactly one dataset directory, e.g. mempo inspect runs/demo/iter-0/rollouts"))
	}
	if in.head < 0 {
		return app.Usage(errors.New("inspect: --head must be at least 0"))
	}
	s, err := audit.Inspect(c.Args().First(), in.head)
	if err != nil {
		return err
	}
	if in.json {
		return in.encode(c.App.Writer, s)
	}
	return s.WriteText(c.App.Writer)
}

func (in *inspectCmd) encode(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func (in *inspectCmd) runTurns(c *cli.Context) error {
	if c.NArg() < 1 {
		return app.Usage(errors.New("inspect --turns: want one or more rollouts dataset directories, e.g. mempo inspect --turns runs/demo/mempo/iter-*/rollouts"))
	}
	var audits []audit.TurnAudit
	for _, dir := range c.Args().Slice() {
		a, err := audit.AuditTurns(dir)
		if err != nil {
			return fmt.Errorf("inspect --turns: %w", err)
		}
		audits = append(audits, a)
	}
	if in.json {
		return in.encode(c.App.Writer, audits)
	}
	return audit.WriteTurns(c.App.Writer, audits)
}

func (in *inspectCmd) runTopMemories(c *cli.Context) error {
	if c.NArg() != 1 {
		return app.Usage(errors.New("inspect --top-memories: want exactly one advantages dataset directory, e.g. mempo inspect --top-memories 10 runs/demo/mempo/iter-4/advantages"))
	}
	ms, err := audit.TopMemories(c.Args().First(), in.topMemories)
	if err != nil {
		return fmt.Errorf("inspect --top-memories: %w", err)
	}
	if in.json {
		return in.encode(c.App.Writer, ms)
	}
	return audit.WriteTopMemories(c.App.Writer, ms)
}
