// Command mempo holds the tools around the stage binaries: data import and
// generation, index, model initialisation, SFT, evaluation, inspection and
// verification of datasets, and a retrieval server.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/urfave/cli/v2"
)

func main() {
	app := &cli.App{
		Name:     "mempo",
		Usage:    "tools for MemPO training pipelines (the stages are the mempo-* binaries)",
		Commands: []*cli.Command{versionCommand},
		OnUsageError: func(_ *cli.Context, err error, _ bool) error {
			return cli.Exit(err.Error(), 2)
		},
	}
	if err := app.Run(os.Args); err != nil {
		var ec cli.ExitCoder
		if errors.As(err, &ec) {
			fmt.Fprintln(os.Stderr, "mempo:", err)
			os.Exit(ec.ExitCode())
		}
		fmt.Fprintln(os.Stderr, "mempo:", err)
		os.Exit(1)
	}
}
