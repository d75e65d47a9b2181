package main

import (
	"github.com/urfave/cli/v2"

	"github.com/mempo/mempo/cmd/internal/stagecmd/advantage"
	"github.com/mempo/mempo/cmd/internal/stagecmd/logprob"
	"github.com/mempo/mempo/cmd/internal/stagecmd/rollout"
	"github.com/mempo/mempo/cmd/internal/stagecmd/score"
	"github.com/mempo/mempo/cmd/internal/stagecmd/update"
)

// stageApps builds the app of each stage binary, by its name: the same app that binary's
// main runs, so a stage run through mempo takes the same flags, prints the same help and
// exits with the same codes.
var stageApps = map[string]func() *cli.App{
	"mempo-rollout":   rollout.App,
	"mempo-score":     score.App,
	"mempo-logprob":   logprob.App,
	"mempo-advantage": advantage.App,
	"mempo-update":    update.App,
}

// stageApp returns the app of the stage binary called name (mempo-rollout, mempo-score,
// mempo-logprob, mempo-advantage or mempo-update), or nil when name is none of them.
func stageApp(name string) *cli.App {
	if build, ok := stageApps[name]; ok {
		return build()
	}
	return nil
}
