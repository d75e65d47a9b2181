package score

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/mempo/mempo/cmd/internal/app/apptest"
	stage "github.com/mempo/mempo/stages/score"
)

// TestConfigReplay: the config a scores manifest records, fed back through --config,
// resolves to the same config.
func TestConfigReplay(t *testing.T) {
	want := stage.Config{Reward: stage.RewardSubEMMean, Tags: stage.Tags{Open: "<a>", Close: "</a>"}}
	got := command{cfg: stage.DefaultConfig()}
	apptest.Replay(t, got.flags(), want, "--rollouts", "x", "--prompts", "p")
	if diff := cmp.Diff(want, got.cfg); diff != "" {
		t.Errorf("replayed config (-want +got):\n%s", diff)
	}
}
