// Command mempo-logprob scores every rollout turn under the old (rollout) policy and the
// frozen reference, and runs MemPO's memory pass: P_mem and P_full of every turn with a
// memory (DESIGN.md §7).
//
// Its command line is package cmd/internal/stagecmd/logprob; the mempo executable runs it
// too when invoked under this name (a symlink mempo-logprob -> mempo).
package main

import (
	"os"

	"github.com/mempo/mempo/cmd/internal/app"
	"github.com/mempo/mempo/cmd/internal/stagecmd/logprob"
	"github.com/mempo/mempo/model/torch"
)

func main() {
	os.Exit(app.Main(app.WithLibtorch(logprob.App(), torch.Version, torch.CUDABuilt), os.Args))
}
