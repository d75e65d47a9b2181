// Command mempo-score scores every trajectory of a rollouts dataset against the golds of
// its prompts: answer extraction, SQuAD-normalised EM and F1, format validity, the outcome
// reward, TT/PT/turns (DESIGN.md §7). Pure Go.
//
// Its command line is package cmd/internal/stagecmd/score; the mempo executable runs it
// too when invoked under this name (a symlink mempo-score -> mempo).
package main

import (
	"os"

	"github.com/mempo/mempo/cmd/internal/app"
	"github.com/mempo/mempo/cmd/internal/stagecmd/score"
)

func main() {
	os.Exit(app.Main(score.App(), os.Args))
}
