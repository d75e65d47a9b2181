package main

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/mempo/mempo/agent/protocol"
	"github.com/mempo/mempo/agent/task"
	"github.com/mempo/mempo/cmd/internal/app"
	"github.com/mempo/mempo/cmd/internal/app/apptest"
	"github.com/mempo/mempo/stages/eval"
	"github.com/mempo/mempo/stages/ingest"
	"github.com/mempo/mempo/stages/initmodel"
	"github.com/mempo/mempo/stages/sft"
)

// Each subcommand that runs a stage replays the config the stage records (a
// manifest's, trainer_state.json's, init's or task.json's config object) through
// --config into the same config. A recorded "seed" is the --seed flag, which the
// stages that take a jobs.Spec read from it.

func TestSFTConfigReplay(t *testing.T) {
	want := sft.DefaultConfig()
	want.Context, want.MaxTurns, want.OracleDrop, want.OracleDistractor = protocol.Mem1, 3, 0.3, 0.2
	want.RetrievalTopK, want.Questions, want.HeldOut, want.Epochs, want.Schedule = 5, 4, 0.2, 1, sft.Linear
	want.AdamW.LR, want.AdamW.Eps, want.BatchTokens, want.ContextLossWeight = 2e-3, 1e-6, 4096, 0.1
	want.Chunk, want.Device, want.DType = 32, "cuda", "bfloat16"
	want.Protocol = protocol.Default()
	want.Protocol.Name = "replayed"
	got := sftCmd{cfg: sft.DefaultConfig()}
	apptest.Replay(t, got.flags(), want, "--task", "t", "--index", "i", "--policy", "p")
	if diff := cmp.Diff(want, got.cfg); diff != "" {
		t.Errorf("replayed config (-want +got):\n%s", diff)
	}
}

func TestGenTaskConfigReplay(t *testing.T) {
	want := task.Config{Seed: 7, People: 40, Cities: 12, Companies: 12, Countries: 4, TwinRate: 0.1, TwoHopRate: 0.5,
		NoYearQuestions: true, TrainK: 3, Train: 24, TestK: []int{2, 4}, Test: 8}
	got := genTaskCmd{cfg: task.DefaultConfig()}
	c := apptest.Replay(t, got.flags(), want)
	got.cfg.Seed = uint64(c.Int64(app.SeedFlag.Name))
	if diff := cmp.Diff(want, got.cfg); diff != "" {
		t.Errorf("replayed config (-want +got):\n%s", diff)
	}
}

func TestImportConfigReplay(t *testing.T) {
	want := ingest.RunConfig{Config: ingest.Config{K: 2, Split: "test", DataSource: "nq"}, ShardRows: 100}
	got := importCmd{cfg: ingest.RunConfig{Config: ingest.Config{K: 1}, ShardRows: ingest.DefaultShardRows}}
	apptest.Replay(t, got.flags(), want)
	if diff := cmp.Diff(want, got.cfg); diff != "" {
		t.Errorf("replayed config (-want +got):\n%s", diff)
	}
}

func TestInitModelConfigReplay(t *testing.T) {
	want := initmodel.Config{VocabSize: 600, MinFrequency: 3, Preset: "qwen2.5-0.5b-shape", Seed: 2}
	got := initModelCmd{cfg: initmodel.DefaultConfig()}
	apptest.Replay(t, got.flags(), want, "--corpus", "c.jsonl", "--out", "o")
	if diff := cmp.Diff(want, got.cfg); diff != "" {
		t.Errorf("replayed config (-want +got):\n%s", diff)
	}
}

func TestEvalConfigReplay(t *testing.T) {
	want := eval.Config{Resamples: 200, Seed: 3, Baseline: "sft", NoReport: true}
	got := evalCmd{cfg: eval.DefaultConfig()}
	c := apptest.Replay(t, got.flags(), want)
	got.cfg.Seed = c.Int64(app.SeedFlag.Name)
	if diff := cmp.Diff(want, got.cfg); diff != "" {
		t.Errorf("replayed config (-want +got):\n%s", diff)
	}
}
