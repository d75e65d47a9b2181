package main

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/mempo/mempo/cmd/internal/app"
	"github.com/mempo/mempo/format"
)

func verifyCommand() *cli.Command {
	return app.Command(&cli.Command{
		Name:      "verify",
		Usage:     "recompute every shard's size and sha256, compare them with the manifest, and check the rows' invariants",
		ArgsUsage: "DIR",
		Description: `Exits 0 with one line when every shard listed in DIR/_manifest.json matches
its recorded size and sha256 and every row keeps the invariants its kind promises
the next stage (rollouts: the memory span inside the response, observation_ids
exactly for the rows with an observation); exits 1 naming each shard that is
missing or differs and each row that breaks an invariant (rerun the stage that
produced DIR with --force to rebuild it).`,
	}, app.Bind(nil), runVerify)
}

func runVerify(c *cli.Context) error {
	if c.NArg() != 1 {
		return cli.Exit("verify: want exactly one dataset directory, e.g. mempo verify runs/demo/iter-0/rollouts", 2)
	}
	dir := c.Args().First()
	d, err := format.OpenDataset(dir)
	if err != nil {
		return cli.Exit(err.Error(), 1)
	}
	if err := d.Verify(); err != nil {
		return cli.Exit(err.Error(), 1)
	}
	if err := d.CheckRows(10); err != nil {
		return cli.Exit(err.Error(), 1)
	}
	fmt.Fprintf(c.App.Writer, "ok %s: %s\n", dir, d)
	return nil
}
