package main

import (
	"encoding/json"

	"github.com/urfave/cli/v2"

	"github.com/mempo/mempo/format"
)

var (
	inspectHeadFlag = &cli.IntFlag{
		Name:     "head",
		Usage:    "number of first rows to show",
		Value:    3,
		EnvVars:  []string{"MEMPO_HEAD"},
		Category: "Inspect",
	}
	inspectJSONFlag = &cli.BoolFlag{
		Name:     "json",
		Usage:    "print the summary as one JSON object instead of text",
		EnvVars:  []string{"MEMPO_JSON"},
		Category: "Inspect",
	}
)

var inspectCommand = &cli.Command{
	Name:      "inspect",
	Usage:     "describe a dataset: kind, schema, manifest, per-column statistics, first rows",
	ArgsUsage: "DIR",
	Description: `Reads the dataset directory DIR (its _manifest.json and every shard it lists;
a directory without a manifest is not a dataset). Each shard is checked against
the manifest's sha256 first. Statistics cover every row: min/max/mean of numeric
columns, length min/max/mean and element statistics of list columns, NaN counts,
and distinct counts of strings.`,
	Flags: []cli.Flag{inspectHeadFlag, inspectJSONFlag},
	Action: func(c *cli.Context) error {
		if c.NArg() != 1 {
			return cli.Exit("inspect: want exactly one dataset directory, e.g. mempo inspect runs/demo/iter-0/rollouts", 2)
		}
		head := c.Int(inspectHeadFlag.Name)
		if head < 0 {
			return cli.Exit("inspect: --head must be at least 0", 2)
		}
		s, err := format.Inspect(c.Args().First(), head)
		if err != nil {
			return cli.Exit(err.Error(), 1)
		}
		if c.Bool(inspectJSONFlag.Name) {
			enc := json.NewEncoder(c.App.Writer)
			enc.SetEscapeHTML(false)
			enc.SetIndent("", "  ")
			return enc.Encode(s)
		}
		return s.WriteText(c.App.Writer)
	},
}
