// Command mempo holds the tools around the stage binaries: data import and
// generation, index, model initialisation, SFT, evaluation, inspection and
// verification of datasets, a retrieval server, a policy server, and a web viewer
// of a run.
//
// It also holds every stage: invoked under a stage binary's name (mempo-rollout,
// mempo-score, mempo-logprob, mempo-advantage, mempo-update), through a symlink such
// as mempo-rollout -> mempo, it is that stage, with the same flags, help and exit codes
// as the binary of that name, so that one executable can carry the whole pipeline.
package main

import (
	"os"
	"path/filepath"

	"github.com/urfave/cli/v2"

	"github.com/mempo/mempo/cmd/internal/app"
	"github.com/mempo/mempo/train/dataparallel"
)

func main() {
	// A process 'mempo sft --procs N' (or 'mempo-update --procs N' run through mempo)
	// started to train beside it serves here and exits.
	dataparallel.ServeWorker()
	// Invoked as a stage (a symlink named after it), mempo is that stage.
	if a := stageApp(filepath.Base(os.Args[0])); a != nil {
		os.Exit(app.Main(linked(a), os.Args))
	}
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
	os.Exit(app.Main(linked(a), os.Args))
}
