package update

import (
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/urfave/cli/v2"

	"github.com/mempo/mempo/cmd/internal/app"
	"github.com/mempo/mempo/cmd/internal/app/apptest"
	stage "github.com/mempo/mempo/stages/update"
	"github.com/mempo/mempo/train/ppo"
)

// TestConfigReplay: the config a checkpoint's trainer_state.json records, fed back
// through --config, resolves to the same update config, fields without a flag
// (betas, chunk) included.
func TestConfigReplay(t *testing.T) {
	want := stage.DefaultConfig()
	want.Objective.Clip.Low, want.Objective.Clip.DualC, want.Objective.KL, want.Objective.Agg = 0.1, 5, ppo.KLK1, ppo.AggSeqMeanTokenSum
	want.Objective.KLCoef, want.Objective.EntropyCoef = 0.01, 0.001
	want.AdamW.LR, want.AdamW.Beta2, want.AdamW.WarmupSteps = 3e-4, 0.99, 10
	want.PPOEpochs, want.MiniBatches, want.MicroTokenBudget, want.Temperature = 2, 8, 4096, 0.7
	want.Chunk, want.Device, want.DType, want.GradCheckpoint = 64, "cpu", "bfloat16", true
	got := command{cfg: stage.DefaultConfig()}
	apptest.Replay(t, got.flags(), want, "--policy", "p", "--ref", "r", "--rollouts", "x", "--logprobs", "l", "--advantages", "a")
	if diff := cmp.Diff(want, got.cfg); diff != "" {
		t.Errorf("replayed config (-want +got):\n%s", diff)
	}
}

// TestSnapshotEvery: 0 is documented (snapshots at epoch ends only) and accepted; a
// negative interval is a usage error naming the flag.
func TestSnapshotEvery(t *testing.T) {
	tests := []struct {
		value string
		code  int
		msg   string
	}{
		{"0", app.ExitOK, ""},
		{"3", app.ExitOK, ""},
		{"-1", app.ExitUsage, "--snapshot-every: -1: want at least 0"},
	}
	for _, tt := range tests {
		t.Run(tt.value, func(t *testing.T) {
			cmd := command{cfg: stage.DefaultConfig()}
			a := app.New("mempo-update", "", cmd.flags(), func(*cli.Context) error { return nil })
			var stderr strings.Builder
			a.Writer, a.ErrWriter = io.Discard, &stderr
			args := []string{"mempo-update", "--policy", "p", "--ref", "r", "--rollouts", "x", "--logprobs", "l", "--advantages", "a", "--snapshot-every", tt.value}
			if code := app.Main(a, args); code != tt.code || !strings.Contains(stderr.String(), tt.msg) {
				t.Errorf("--snapshot-every %s = exit %d, stderr %q; want %d mentioning %q", tt.value, code, stderr.String(), tt.code, tt.msg)
			}
			if tt.code == app.ExitOK && fmt.Sprint(cmd.snapshotEvery) != tt.value {
				t.Errorf("--snapshot-every %s stored %d", tt.value, cmd.snapshotEvery)
			}
		})
	}
}

// TestProcsFlag: --procs sets the config's process count; a negative count is a usage
// error naming the flag.
func TestProcsFlag(t *testing.T) {
	for _, tt := range []struct {
		value string
		code  int
		msg   string
	}{
		{"2", app.ExitOK, ""},
		{"-1", app.ExitUsage, "--procs: -1: want at least 0"},
	} {
		cmd := command{cfg: stage.DefaultConfig()}
		a := app.New("mempo-update", "", cmd.flags(), func(*cli.Context) error { return nil })
		var stderr strings.Builder
		a.Writer, a.ErrWriter = io.Discard, &stderr
		args := []string{"mempo-update", "--policy", "p", "--ref", "r", "--rollouts", "x", "--logprobs", "l", "--advantages", "a", "--procs", tt.value}
		if code := app.Main(a, args); code != tt.code || !strings.Contains(stderr.String(), tt.msg) {
			t.Errorf("--procs %s = exit %d, stderr %q; want %d mentioning %q", tt.value, code, stderr.String(), tt.code, tt.msg)
		}
		if tt.code == app.ExitOK && fmt.Sprint(cmd.cfg.Procs) != tt.value {
			t.Errorf("--procs %s stored %d", tt.value, cmd.cfg.Procs)
		}
	}
}
