package advantage

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/mempo/mempo/cmd/internal/app/apptest"
	stage "github.com/mempo/mempo/stages/advantage"
)

// TestConfigReplay: the config an advantages manifest records, fed back through
// --config, resolves to the same config.
func TestConfigReplay(t *testing.T) {
	want := stage.Config{NoStdNorm: true, MemBaseline: stage.Baseline{Kind: stage.BaselineConst, Value: 0.5},
		MemPool: stage.PoolTurn, MemCoef: 0.3}
	got := command{cfg: stage.DefaultConfig()}
	apptest.Replay(t, got.flags(), want, "--rollouts", "x", "--scores", "s", "--logprobs", "l")
	if diff := cmp.Diff(want, got.cfg); diff != "" {
		t.Errorf("replayed config (-want +got):\n%s", diff)
	}
}
