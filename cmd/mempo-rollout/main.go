// Command mempo-rollout is the rollout stage of a MemPO iteration (DESIGN.md §3, §6):
// prompts + policy checkpoint + retriever → rollouts dataset, one row per (uid, sample,
// turn) with the exact context ids, the generated ids and their sampling log-probs.
//
// Its command line is package cmd/internal/stagecmd/rollout; the mempo executable runs it
// too when invoked under this name (a symlink mempo-rollout -> mempo).
package main

import (
	"os"

	"github.com/mempo/mempo/cmd/internal/app"
	"github.com/mempo/mempo/cmd/internal/stagecmd/rollout"
	"github.com/mempo/mempo/model/torch"
)

func main() {
	os.Exit(app.Main(app.WithLibtorch(rollout.App(), torch.Version, torch.CUDABuilt), os.Args))
}
