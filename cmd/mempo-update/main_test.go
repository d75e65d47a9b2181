package main

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/mempo/mempo/cmd/internal/app/apptest"
	"github.com/mempo/mempo/stages/update"
	"github.com/mempo/mempo/train/ppo"
)

// TestConfigReplay: the config a checkpoint's trainer_state.json records, fed back
// through --config, resolves to the same update config, fields without a flag
// (betas, chunk) included.
func TestConfigReplay(t *testing.T) {
	want := update.DefaultConfig()
	want.Objective.Clip.Low, want.Objective.Clip.DualC, want.Objective.KL, want.Objective.Agg = 0.1, 5, ppo.KLK1, ppo.AggSeqMeanTokenSum
	want.Objective.KLCoef, want.Objective.EntropyCoef = 0.01, 0.001
	want.AdamW.LR, want.AdamW.Beta2, want.AdamW.WarmupSteps = 3e-4, 0.99, 10
	want.PPOEpochs, want.MiniBatches, want.MicroTokenBudget, want.Temperature = 2, 8, 4096, 0.7
	want.Chunk, want.Device, want.DType = 64, "cuda:1", "bfloat16"
	got := command{cfg: update.DefaultConfig()}
	apptest.Replay(t, got.flags(), want, "--policy", "p", "--ref", "r", "--rollouts", "x", "--logprobs", "l", "--advantages", "a")
	if diff := cmp.Diff(want, got.cfg); diff != "" {
		t.Errorf("replayed config (-want +got):\n%s", diff)
	}
}
