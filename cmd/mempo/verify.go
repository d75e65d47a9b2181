package main

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/mempo/mempo/audit"
	"github.com/mempo/mempo/cmd/internal/app"
)

func verifyCommand() *cli.Command {
	return app.Command(&cli.Command{
		Name:      "verify",
		Usage:     "check a committed directory (dataset, checkpoint, task or index) against its commit record",
		ArgsUsage: "DIR",
		Description: `DIR is whatever a mempo stage committed, recognised by its commit record:
  dataset     _manifest.json: every shard's size and sha256, the manifest's rows,
              kind and schema against each shard's footer, and the rows' invariants
              (rollouts: the memory span inside the response, observation_ids exactly
              for the rows with an observation);
  checkpoint  checkpoint.json: every recorded file's size and sha256 (weights,
              config, tokenizer, optimizer and trainer state), and no unrecorded file;
  task        task.json: corpus.jsonl's sha256 and each prompts dataset, verified as
              a dataset and matched with the digest and rows task.json records;
  index       checkpoint.json of stage index: every recorded file's size and
              sha256 (bleve's files, mempo_index.json), no unrecorded file, and the
              document count bleve reads (the corpus, when at hand, is reported as
              changed or not).
Exits 0 with one line when everything matches; exits 1 naming each file that is
missing or differs (rerun the stage that produced DIR with --force to rebuild it).`,
	}, app.Bind(nil), runVerify)
}

func runVerify(c *cli.Context) error {
	if c.NArg() != 1 {
		return cli.Exit("verify: want exactly one committed directory, e.g. mempo verify runs/demo/iter-0/rollouts", 2)
	}
	dir := c.Args().First()
	summary, err := audit.Verify(dir)
	if err != nil {
		return cli.Exit(err.Error(), 1)
	}
	fmt.Fprintf(c.App.Writer, "ok %s: %s\n", dir, summary)
	return nil
}
