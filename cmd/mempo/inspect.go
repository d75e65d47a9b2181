package main

import (
	"encoding/json"

	"github.com/urfave/cli/v2"

	"github.com/mempo/mempo/cmd/internal/app"
	"github.com/mempo/mempo/format"
)

// inspectCmd is what 'mempo inspect' resolves its flags into.
type inspectCmd struct {
	head int // first rows shown; format.Inspect has no default of its own
	json bool
}

func inspectCommand() *cli.Command {
	in := &inspectCmd{head: 3}
	return app.Command(&cli.Command{
		Name:      "inspect",
		Usage:     "describe a dataset: kind, schema, manifest, per-column statistics, first rows",
		ArgsUsage: "DIR",
		Description: `Reads the dataset directory DIR (its _manifest.json and every shard it lists;
a directory without a manifest is not a dataset). Each shard is checked against
the manifest's sha256 first. Statistics cover every row: min/max/mean of numeric
columns, length min/max/mean and element statistics of list columns, NaN counts,
and distinct counts of strings.`,
	}, in.flags(), in.run)
}

func (in *inspectCmd) flags() *app.Flags {
	return app.Bind(nil, []app.Flag{
		app.Int(&in.head, cli.IntFlag{Name: "head", Category: "Inspect", Usage: "number of first rows to show"}),
		app.Bool(&in.json, cli.BoolFlag{Name: "json", Category: "Inspect", Usage: "print the summary as one JSON object instead of text"}),
	})
}

func (in *inspectCmd) run(c *cli.Context) error {
	if c.NArg() != 1 {
		return cli.Exit("inspect: want exactly one dataset directory, e.g. mempo inspect runs/demo/iter-0/rollouts", 2)
	}
	if in.head < 0 {
		return cli.Exit("inspect: --head must be at least 0", 2)
	}
	s, err := format.Inspect(c.Args().First(), in.head)
	if err != nil {
		return cli.Exit(err.Error(), 1)
	}
	if in.json {
		enc := json.NewEncoder(c.App.Writer)
		enc.SetEscapeHTML(false)
		enc.SetIndent("", "  ")
		return enc.Encode(s)
	}
	return s.WriteText(c.App.Writer)
}
