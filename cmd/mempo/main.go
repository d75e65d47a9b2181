// Command mempo holds the tools around the stage binaries: data import and
// generation, index, model initialisation, SFT, evaluation, inspection and
// verification of datasets, a retrieval server, a policy server, and a web viewer
// of a run.
package main

import (
	"os"

	"github.com/urfave/cli/v2"

	"github.com/mempo/mempo/cmd/internal/app"
	"github.com/mempo/mempo/train/dataparallel"
)

func main() {
	// A process 'mempo sft --procs N' started to train beside it serves here and exits.
	dataparallel.ServeWorker()
	a := &cli.App{
		Name:  "mempo",
		Usage: "tools for MemPO training pipelines (the stages are the mempo-* binaries)",
		Commands: []*cli.Command{
			curvesCommand(),
			evalCommand(),
			genTaskCommand(),
			importCommand(),
			indexCommand(),
			initModelCommand(),
			inspectCommand(),
			servePolicyCommand(),
			serveRetrieverCommand(),
			sftCommand(),
			verifyCommand(),
			versionCommand(),
			viewCommand(),
		},
	}
	app.Prepare(a)
	os.Exit(app.Main(a, os.Args))
}
