package app_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mempo/mempo/cmd/internal/app"
	"github.com/mempo/mempo/format"
	"github.com/mempo/mempo/jobs/jobstest"
	"github.com/urfave/cli/v2"
)

// These tests drive a stage binary end to end through the CLI glue: a probe command built
// on the tensor-free jobstest stage runs in a child process (the test binary re-executed),
// so exit codes and the process environment are the real ones.
const childEnv = "MEMPO_APP_TEST_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		os.Unsetenv(childEnv)
		os.Exit(app.Main(newProbe(), append([]string{"mempo-probe"}, os.Args[1:]...)))
	}
	os.Exit(m.Run())
}

// newProbe builds the probe command, its flags bound as a stage binary binds them.
func newProbe() *cli.App {
	cfg := jobstest.Config{Rows: 1000, Shards: 8, Width: 64, Batch: 64}
	fs := app.Bind(&cfg, app.StageFlags(), []app.Flag{
		app.Int(&cfg.Rows, cli.IntFlag{Name: "rows", Category: "Stage", Usage: "questions to generate when --input is not set"}),
		app.Int(&cfg.Shards, cli.IntFlag{Name: "shards", Category: "Stage", Usage: "shard plan size: rows split into this many contiguous groups"}),
		app.Int(&cfg.Width, cli.IntFlag{Name: "width", Category: "Stage", Usage: "token ids per row"}),
		app.String(&cfg.Input, cli.StringFlag{Name: "input", Category: "Stage", Usage: "JSONL `FILE` of {\"question\": ...} objects to use instead of generated questions"}),
		app.Int(&cfg.Batch, cli.IntFlag{Name: "batch", Category: "Stage", Usage: "rows written between flushes and progress reports"}),
	})
	return app.New("mempo-probe", "run the tensor-free probe stage", fs, func(c *cli.Context) error {
		spec, err := app.StageSpec(c)
		if err != nil {
			return err
		}
		_, err = jobstest.Run(c.Context, cfg, spec)
		return err
	})
}

func runMain(t *testing.T, env []string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(append(os.Environ(), childEnv+"=1"), env...)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return code, out.String(), errb.String()
}

func TestExitStatus(t *testing.T) {
	dir := t.TempDir()
	badConfig := filepath.Join(dir, "bad.json")
	os.WriteFile(badConfig, []byte(`{"rows": 5, "colour": "red"}`), 0o644)
	tests := []struct {
		name string
		args []string
		want int
		msg  string
	}{
		{"ok", []string{"--out", filepath.Join(dir, "ok"), "--rows", "6", "--shards", "2"}, 0, ""},
		{"unknown flag", []string{"--out", filepath.Join(dir, "x"), "--colour", "red"}, 2, "-colour"},
		{"config with unknown key", []string{"--out", filepath.Join(dir, "x"), "--config", badConfig}, 2, `unknown key "colour"`},
		{"bad stage config", []string{"--out", filepath.Join(dir, "x"), "--shards", "0"}, 1, "want shards >= 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, stderr := runMain(t, nil, tt.args...)
			if code != tt.want || !strings.Contains(stderr, tt.msg) {
				t.Errorf("exit %d, stderr %q; want %d mentioning %q", code, stderr, tt.want, tt.msg)
			}
		})
	}
}

func TestEnvAndCacheAndScaleOut(t *testing.T) {
	dir := t.TempDir()
	whole := filepath.Join(dir, "whole")
	env := []string{"MEMPO_ROWS=30", "MEMPO_SHARDS=5", "MEMPO_WIDTH=3", "MEMPO_PROGRESS=none"}
	if code, _, stderr := runMain(t, env, "--out", whole); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	m, err := format.ReadManifest(whole)
	if err != nil || m.Rows() != 30 || len(m.Outputs) != 5 {
		t.Fatalf("manifest %v err %v, want 30 rows in 5 shards set by MEMPO_ROWS and MEMPO_SHARDS", m, err)
	}
	if _, stdout, _ := runMain(t, env, "--out", whole); !strings.Contains(stdout, "cache hit") {
		t.Errorf("second run stdout %q, want a cache hit", stdout)
	}

	sharded := filepath.Join(dir, "sharded")
	for i, idx := range []string{"0", "1", "2"} {
		code, _, stderr := runMain(t, append(env, "JOB_COMPLETION_INDEX="+idx), "--out", sharded, "--shard-count", "3")
		if code != 0 {
			t.Fatalf("part %d: exit %d: %s", i, code, stderr)
		}
	}
	if code, _, stderr := runMain(t, env, "--out", sharded, "--merge", "3"); code != 0 {
		t.Fatalf("merge: exit %d: %s", code, stderr)
	}
	merged, err := format.ReadManifest(sharded)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := merged.Digest(), m.Digest(); got != want {
		t.Errorf("merged digest %s, want the unsharded digest %s", got, want)
	}
}
