package main

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/mempo/mempo/cmd/internal/app/apptest"
	"github.com/mempo/mempo/stages/score"
)

// TestConfigReplay: the config a scores manifest records, fed back through --config,
// resolves to the same config.
func TestConfigReplay(t *testing.T) {
	want := score.Config{Reward: score.RewardSubEMMean, Tags: score.Tags{Open: "<a>", Close: "</a>"}}
	got := command{cfg: score.DefaultConfig()}
	apptest.Replay(t, got.flags(), want, "--rollouts", "x", "--prompts", "p")
	if diff := cmp.Diff(want, got.cfg); diff != "" {
		t.Errorf("replayed config (-want +got):\n%s", diff)
	}
}
