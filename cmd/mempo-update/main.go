// Command mempo-update is the update stage of a MemPO iteration (DESIGN.md §7): policy
// checkpoint + reference + rollouts, logprobs and advantages datasets → the next policy
// checkpoint (HF layout) with its optimizer and trainer state, by PPO in mini-batches
// with exact gradient accumulation. A killed update resumes from its last finished
// mini-batch and ends with the same weights.
//
// Its command line is package cmd/internal/stagecmd/update; the mempo executable runs it
// too when invoked under this name (a symlink mempo-update -> mempo).
package main

import (
	"os"

	"github.com/mempo/mempo/cmd/internal/app"
	"github.com/mempo/mempo/cmd/internal/stagecmd/update"
	"github.com/mempo/mempo/model/torch"
	"github.com/mempo/mempo/train/dataparallel"
)

func main() {
	// A process 'mempo-update --procs N' started to train beside it serves here and exits.
	dataparallel.ServeWorker()
	os.Exit(app.Main(app.WithLibtorch(update.App(), torch.Version, torch.CUDABuilt), os.Args))
}
