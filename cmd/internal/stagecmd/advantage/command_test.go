package advantage

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/mempo/mempo/cmd/internal/app"
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

// TestOverflowingFlags: a coefficient that would overflow the float32 advantages is a
// usage error naming the flag and the value, before any work: nothing is written
// beside the output (issue 45: --mem-coef 1e308 computed every shard, then failed at
// the commit with "json: unsupported value: +Inf" and left its temp dir).
func TestOverflowingFlags(t *testing.T) {
	for _, tt := range []struct{ flag, value, want string }{
		{"--mem-coef", "1e308", "--mem-coef 1e+308: want a number in [-1e+06, 1e+06]"},
		{"--mem-coef", "-2e6", "--mem-coef -2e+06"},
		{"--mem-baseline", "const:1e39", `--mem-baseline "const:1e39": want const:<v> with v a number in [-1e+06, 1e+06]`},
	} {
		t.Run(tt.flag+"="+tt.value, func(t *testing.T) {
			dir := t.TempDir()
			a := App()
			var stdout, stderr bytes.Buffer
			a.Writer, a.ErrWriter = &stdout, &stderr
			args := append([]string{"mempo-advantage"}, writeInputs(t, dir)...)
			args = append(args, "--out", filepath.Join(dir, "adv"), tt.flag, tt.value)
			if code := app.Main(a, args); code != app.ExitUsage || !strings.Contains(stderr.String(), tt.want) {
				t.Errorf("mempo-advantage %s %s: exit %d, stderr %q; want %d naming %q", tt.flag, tt.value, code, stderr.String(), app.ExitUsage, tt.want)
			}
			if left, _ := filepath.Glob(filepath.Join(dir, "adv*")); len(left) != 0 {
				t.Errorf("after the refused run: %v, want nothing written", left)
			}
		})
	}
}
