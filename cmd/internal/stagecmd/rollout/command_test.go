package rollout

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/mempo/mempo/agent/protocol"
	"github.com/mempo/mempo/cmd/internal/app"
	"github.com/mempo/mempo/cmd/internal/app/apptest"
	stage "github.com/mempo/mempo/stages/rollout"
)

// TestConfigReplay: the config a rollouts manifest records, the resolved protocol
// description included, fed back through --config, resolves to the same config.
func TestConfigReplay(t *testing.T) {
	want := stage.DefaultConfig()
	want.N, want.Context, want.MaxTurns, want.Temperature, want.TopP, want.TopK = 2, protocol.Mem1, 3, 0.5, 0.9, 20
	want.MaxNewTokens, want.RetrievalTopK, want.PromptOffset, want.PromptLimit, want.PromptsPerShard = 16, 5, 4, 2, 3
	want.RetrieverURL, want.Device, want.DType = "http://localhost:8000", "cpu", "float16"
	want.Engine, want.EngineURL, want.EngineModel = stage.EngineServer, "http://localhost:8001/v1", "policy"
	want.Protocol = protocol.Default()
	want.Protocol.Name, want.Protocol.System = "replayed", "You search."
	got := command{cfg: stage.DefaultConfig()}
	apptest.Replay(t, got.flags(), want, "--prompts", "p", "--policy", "c")
	if diff := cmp.Diff(want, got.cfg); diff != "" {
		t.Errorf("replayed config (-want +got):\n%s", diff)
	}
}

// TestFlagRefusals: a value no setting means is a usage error naming the flag, found
// while the flags are resolved: exit 2 before any input is opened or directory created.
func TestFlagRefusals(t *testing.T) {
	tests := []struct {
		args []string
		msg  string
	}{
		{[]string{"--temperature", "Inf"}, "--temperature: +Inf: want a finite number"},
		{[]string{"--temperature", "NaN"}, "--temperature: NaN: want a finite number"},
		{[]string{"--device", "tpu"}, `--device: "tpu": want cpu, cuda or cuda:N`},
		{[]string{"--dtype", "int8"}, `--dtype: "int8": want float32, bfloat16 or float16`},
		{[]string{"--attention", "flash"}, `--attention: "flash": want auto, eager or sdpa`},
		{[]string{"--engine", "gpu"}, `--engine "gpu": want local or server`},
		{[]string{"--engine", "server"}, `--engine server needs --engine-url`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			dir := t.TempDir()
			cmd := command{cfg: stage.DefaultConfig()}
			a := app.New("mempo-rollout", "", cmd.flags(), cmd.run)
			var stderr strings.Builder
			a.Writer, a.ErrWriter = io.Discard, &stderr
			args := append([]string{"mempo-rollout", "--prompts", filepath.Join(dir, "p"), "--policy", filepath.Join(dir, "c"), "--out", filepath.Join(dir, "out")}, tt.args...)
			if code := app.Main(a, args); code != app.ExitUsage || !strings.Contains(stderr.String(), tt.msg) {
				t.Errorf("mempo-rollout %q = exit %d, stderr %q; want %d mentioning %q", tt.args, code, stderr.String(), app.ExitUsage, tt.msg)
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 0 {
				t.Errorf("mempo-rollout %q left %v, want nothing", tt.args, entries)
			}
		})
	}
}
