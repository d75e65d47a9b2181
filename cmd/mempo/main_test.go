package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/urfave/cli/v2"

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
	want.Chunk, want.Device, want.DType = 32, "cpu", "bfloat16"
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
	want := ingest.RunConfig{Config: ingest.Config{K: 2, Split: "test", DataSource: "nq", OverrideDataSource: "mix"}, ShardRows: 100}
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

// TestFlagRefusals: a value no setting means is refused while the flags are resolved —
// exit 2 naming the flag, and nothing written. --snapshot-every 0 is documented (epoch
// ends only) and stays accepted.
func TestFlagRefusals(t *testing.T) {
	tests := []struct {
		name string
		args []string
		msg  string
	}{
		{"no training questions", []string{"gen-task", "--train", "0"}, "--train: 0: want at least 1"},
		{"no test questions", []string{"gen-task", "--test", "0"}, "--test: 0: want at least 1"},
		{"negative snapshot interval", []string{"sft", "--task", "t", "--index", "i", "--policy", "p", "--snapshot-every", "-1"}, "--snapshot-every: -1: want at least 0"},
		{"negative process count", []string{"sft", "--task", "t", "--index", "i", "--policy", "p", "--procs", "-1"}, "--procs: -1: want at least 0"},
		{"unknown device", []string{"sft", "--task", "t", "--index", "i", "--policy", "p", "--device", "tpu"}, `--device: "tpu": want cpu, cuda or cuda:N`},
		{"unknown dtype", []string{"sft", "--task", "t", "--index", "i", "--policy", "p", "--dtype", "int8"}, `--dtype: "int8": want float32, bfloat16 or float16`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			out := filepath.Join(dir, "out")
			a := &cli.App{Name: "mempo", Commands: []*cli.Command{genTaskCommand(), sftCommand()}}
			app.Prepare(a)
			var stderr strings.Builder
			a.Writer, a.ErrWriter = io.Discard, &stderr
			args := append(append([]string{"mempo"}, tt.args...), "--out", out)
			if code := app.Main(a, args); code != app.ExitUsage || !strings.Contains(stderr.String(), tt.msg) {
				t.Errorf("mempo %q = exit %d, stderr %q; want %d mentioning %q", tt.args, code, stderr.String(), app.ExitUsage, tt.msg)
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 0 {
				t.Errorf("mempo %q left %v in %s, want nothing", tt.args, entries, dir)
			}
		})
	}
}

// serve-retriever documents every limit in --help and refuses a meaningless value
// with exit 2 naming its flag, before it opens the index.
func TestServeRetrieverFlags(t *testing.T) {
	run := func(args ...string) (code int, stdout, stderr string) {
		a := &cli.App{Name: "mempo", Commands: []*cli.Command{serveRetrieverCommand()}}
		app.Prepare(a)
		var out, errOut strings.Builder
		a.Writer, a.ErrWriter = &out, &errOut
		code = app.Main(a, append([]string{"mempo", "serve-retriever"}, args...))
		return code, out.String(), errOut.String()
	}
	code, help, _ := run("--help")
	if code != app.ExitOK {
		t.Fatalf("serve-retriever --help: exit %d", code)
	}
	for _, want := range []string{
		"--max-topk", "--max-queries", "--max-query-bytes", "--max-body-bytes", "--max-inflight",
		"--read-header-timeout", "--read-timeout", "--write-timeout", "--idle-timeout",
		"(default: 16777216)", "(default: 8192)", "(default: 64)", "413", "503",
	} {
		if !strings.Contains(help, want) {
			t.Errorf("serve-retriever --help lacks %q:\n%s", want, help)
		}
	}
	missing := filepath.Join(t.TempDir(), "no-index") // opening it would fail with exit 1
	tests := []struct {
		flag, value string
	}{
		{"max-topk", "0"},
		{"max-queries", "0"},
		{"max-query-bytes", "-1"},
		{"max-body-bytes", "0"},
		{"max-inflight", "0"},
		{"read-header-timeout", "0"},
		{"read-timeout", "-1"},
		{"write-timeout", "0"},
		{"idle-timeout", "0"},
		{"topk", "101"},
		{"workers", "-1"},
	}
	for _, tt := range tests {
		t.Run(tt.flag, func(t *testing.T) {
			code, _, stderr := run("--index", missing, "--"+tt.flag, tt.value)
			if code != app.ExitUsage || !strings.Contains(stderr, "--"+tt.flag) {
				t.Errorf("serve-retriever --%s %s = exit %d, stderr %q; want %d naming --%s",
					tt.flag, tt.value, code, stderr, app.ExitUsage, tt.flag)
			}
		})
	}
}

// serve-policy documents its batch limits in --help and refuses a meaningless value
// with exit 2 naming its flag, before it loads the policy.
func TestServePolicyFlags(t *testing.T) {
	run := func(args ...string) (code int, stdout, stderr string) {
		a := &cli.App{Name: "mempo", Commands: []*cli.Command{servePolicyCommand()}}
		app.Prepare(a)
		var out, errOut strings.Builder
		a.Writer, a.ErrWriter = &out, &errOut
		code = app.Main(a, append([]string{"mempo", "serve-policy"}, args...))
		return code, out.String(), errOut.String()
	}
	code, help, _ := run("--help")
	if code != app.ExitOK {
		t.Fatalf("serve-policy --help: exit %d", code)
	}
	for _, want := range []string{
		"--max-batch ", "--max-batch-tokens", "(default: 64)", "(default: 524288)", "continuous", "--max-inflight", "503",
		"--prefix-cache-tokens",
	} {
		if !strings.Contains(help, want) {
			t.Errorf("serve-policy --help lacks %q:\n%s", want, help)
		}
	}
	missing := filepath.Join(t.TempDir(), "no-policy") // loading it would fail with exit 1
	for _, tt := range []struct{ flag, value string }{
		{"max-batch", "0"},
		{"max-batch-tokens", "0"},
		{"prefix-cache-tokens", "-1"},
		{"max-tokens", "0"},
		{"max-inflight", "0"},
	} {
		t.Run(tt.flag, func(t *testing.T) {
			code, _, stderr := run("--policy", missing, "--"+tt.flag, tt.value)
			if code != app.ExitUsage || !strings.Contains(stderr, "--"+tt.flag) {
				t.Errorf("serve-policy --%s %s = exit %d, stderr %q; want %d naming --%s",
					tt.flag, tt.value, code, stderr, app.ExitUsage, tt.flag)
			}
		})
	}
}
