package logprob

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/mempo/mempo/cmd/internal/app/apptest"
	stage "github.com/mempo/mempo/stages/logprob"
)

// TestConfigReplay: the config a logprobs manifest records, fed back through --config,
// resolves to the same config, the protocol's answer tag and probe included.
func TestConfigReplay(t *testing.T) {
	want := stage.DefaultConfig()
	want.TokenBudget, want.Chunk, want.Temperature, want.MemoryPass, want.Device, want.DType = 4096, 64, 0.5, false, "cpu", "float32"
	want.AnswerOpen, want.AnswerSeparator, want.Probe = "<ans>", " | ", "<think>done</think>"
	got := command{cfg: stage.DefaultConfig()}
	apptest.Replay(t, got.flags(), want, "--rollouts", "x", "--policy", "p", "--ref", "r")
	if diff := cmp.Diff(want, got.cfg); diff != "" {
		t.Errorf("replayed config (-want +got):\n%s", diff)
	}
}
