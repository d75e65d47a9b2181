// Command mempo-advantage turns scores and memory probabilities into MemPO's per-token
// advantages: the GRPO outcome advantage plus λ times the memory advantage on each
// <mem> span (DESIGN.md §7). Pure arithmetic over cached datasets, so re-running it with
// new flags re-scores cached rollouts without regenerating them.
//
// Its command line is package cmd/internal/stagecmd/advantage; the mempo executable runs it
// too when invoked under this name (a symlink mempo-advantage -> mempo).
package main

import (
	"os"

	"github.com/mempo/mempo/cmd/internal/app"
	"github.com/mempo/mempo/cmd/internal/stagecmd/advantage"
)

func main() {
	os.Exit(app.Main(advantage.App(), os.Args))
}
