package main

import (
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/mempo/mempo/cmd/internal/app"
)

// TestStageApp: under each stage binary's name mempo is that stage; under its own name,
// or any other, it is the tools.
func TestStageApp(t *testing.T) {
	for _, name := range []string{"mempo-rollout", "mempo-score", "mempo-logprob", "mempo-advantage", "mempo-update"} {
		a := stageApp(name)
		if a == nil {
			t.Errorf("stageApp(%q) = nil, want that stage's app", name)
			continue
		}
		if a.Name != name {
			t.Errorf("stageApp(%q).Name = %q", name, a.Name)
		}
	}
	for _, name := range []string{"mempo", "mempo-foo", "", "rollout", "mempo-rollout.sh"} {
		if a := stageApp(name); a != nil {
			t.Errorf("stageApp(%q) = app %q, want nil", name, a.Name)
		}
	}
}

// TestStageCommandsLogToTensorBoard: every command that runs a stage (it has the
// stage runtime's --progress) takes --tb-dir and --tb-step, as the stage binaries do.
func TestStageCommandsLogToTensorBoard(t *testing.T) {
	cmds := []*cli.Command{curvesCommand(), evalCommand(), genTaskCommand(), importCommand(), indexCommand(), initModelCommand(),
		inspectCommand(), servePolicyCommand(), serveRetrieverCommand(), sftCommand(), verifyCommand(), viewCommand()}
	for _, c := range cmds {
		has := map[string]bool{}
		for _, f := range c.Flags {
			has[f.Names()[0]] = true
		}
		if has[app.ProgressFlag.Name] && !(has[app.TBDirFlag.Name] && has[app.TBStepFlag.Name]) {
			t.Errorf("mempo %s has --progress but not --tb-dir and --tb-step", c.Name)
		}
	}
}
