package main

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/mempo/mempo/agent/protocol"
	"github.com/mempo/mempo/cmd/internal/app/apptest"
	"github.com/mempo/mempo/stages/rollout"
)

// TestConfigReplay: the config a rollouts manifest records, the resolved protocol
// description included, fed back through --config, resolves to the same config.
func TestConfigReplay(t *testing.T) {
	want := rollout.DefaultConfig()
	want.N, want.Context, want.MaxTurns, want.Temperature, want.TopP, want.TopK = 2, protocol.Mem1, 3, 0.5, 0.9, 20
	want.MaxNewTokens, want.RetrievalTopK, want.PromptOffset, want.PromptLimit, want.PromptsPerShard = 16, 5, 4, 2, 3
	want.RetrieverURL, want.Device, want.DType = "http://localhost:8000", "cuda", "float16"
	want.Protocol = protocol.Default()
	want.Protocol.Name, want.Protocol.System = "replayed", "You search."
	got := command{cfg: rollout.DefaultConfig()}
	apptest.Replay(t, got.flags(), want, "--prompts", "p", "--policy", "c")
	if diff := cmp.Diff(want, got.cfg); diff != "" {
		t.Errorf("replayed config (-want +got):\n%s", diff)
	}
}
