package app

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/mempo/mempo/jobs"
)

// testApp builds a stage-like app whose action records the resolved spec; rows is
// bound to --max-rows, default 10.
func testApp(got *jobs.Spec, rows *int, fail error) (*cli.App, *bytes.Buffer, *bytes.Buffer) {
	var stdout, stderr bytes.Buffer
	*rows = 10
	fs := Bind(nil, StageFlags(), []Flag{Int(rows, cli.IntFlag{Name: "max-rows", Category: "Stage", Usage: "rows"})})
	a := New("mempo-test", "test stage", fs, func(c *cli.Context) error {
		spec, err := StageSpec(c)
		if err != nil {
			return err
		}
		*got = spec
		return fail
	})
	a.Writer, a.ErrWriter = &stdout, &stderr
	return a, &stdout, &stderr
}

func run(t *testing.T, args ...string) (code int, spec jobs.Spec, rows int, stderr string) {
	t.Helper()
	a, _, errb := testApp(&spec, &rows, nil)
	code = Main(a, append([]string{"mempo-test"}, args...))
	return code, spec, rows, errb.String()
}

func TestEnvName(t *testing.T) {
	tests := []struct{ flag, want string }{
		{"out", "MEMPO_OUT"},
		{"shard-count", "MEMPO_SHARD_COUNT"},
		{"log-level", "MEMPO_LOG_LEVEL"},
	}
	for _, tt := range tests {
		if got := EnvName(tt.flag); got != tt.want {
			t.Errorf("EnvName(%q) = %q, want %q", tt.flag, got, tt.want)
		}
	}
}

func TestExitCodes(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		args []string
		want int
		msg  string
	}{
		{"ok", nil, []string{"--out", "d"}, ExitOK, ""},
		{"unknown flag", nil, []string{"--out", "d", "--bogus"}, ExitUsage, "-bogus"},
		{"bad flag value", nil, []string{"--out", "d", "--seed", "x"}, ExitUsage, "seed"},
		{"bad env value", map[string]string{"MEMPO_SEED": "x"}, []string{"--out", "d"}, ExitUsage, "MEMPO_SEED"},
		{"no out", nil, nil, ExitUsage, "--out is required"},
		{"bad shard", nil, []string{"--out", "d", "--shard", "4/4"}, ExitUsage, `shard "4/4"`},
		{"bad progress", nil, []string{"--out", "d", "--progress", "fancy"}, ExitUsage, "--progress"},
		{"bad debug switch", nil, []string{"--out", "d", "--debug", "keyhsh"}, ExitUsage, "keyhsh"},
		{"stray argument", nil, []string{"--out", "d", "extra"}, ExitUsage, `"extra"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			code, _, _, stderr := run(t, tt.args...)
			if code != tt.want || !strings.Contains(stderr, tt.msg) {
				t.Errorf("Main(%q) = %d, stderr %q; want %d mentioning %q", tt.args, code, stderr, tt.want, tt.msg)
			}
		})
	}
	t.Run("required flag", func(t *testing.T) {
		a := New("mempo-test", "", Bind(nil, Unbound(&cli.StringFlag{Name: "corpus", Required: true})), func(*cli.Context) error { return nil })
		var stderr strings.Builder
		a.Writer, a.ErrWriter = io.Discard, &stderr
		if code := Main(a, []string{"mempo-test"}); code != ExitUsage || !strings.Contains(stderr.String(), "corpus") {
			t.Errorf("Main without a required flag = %d, stderr %q; want %d naming the flag", code, stderr.String(), ExitUsage)
		}
	})
	t.Run("failure", func(t *testing.T) {
		var spec jobs.Spec
		var rows int
		a, _, stderr := testApp(&spec, &rows, errors.New("shard 3: boom"))
		if code := Main(a, []string{"mempo-test", "--out", "d"}); code != ExitFailure || !strings.Contains(stderr.String(), "mempo-test: shard 3: boom") {
			t.Errorf("Main = %d, stderr %q; want 1 naming the binary and the error", code, stderr.String())
		}
	})
}

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestPrecedence(t *testing.T) {
	config := writeConfig(t, `{"seed": 30, "max-rows": 300, "out": "from-config", "force": true}`)
	tests := []struct {
		name      string
		env       map[string]string
		args      []string
		wantSeed  int64
		wantRows  int
		wantOut   string
		wantForce bool
	}{
		{"defaults", nil, []string{"--out", "d"}, 1, 10, "d", false},
		{"config", nil, []string{"--config", config}, 30, 300, "from-config", true},
		{"env over config", map[string]string{"MEMPO_SEED": "20", "MEMPO_MAX_ROWS": "200"}, []string{"--config", config}, 20, 200, "from-config", true},
		{"flag over env", map[string]string{"MEMPO_SEED": "20"}, []string{"--config", config, "--seed", "10", "--out", "o"}, 10, 300, "o", true},
		{"config from env", map[string]string{"MEMPO_CONFIG": config}, nil, 30, 300, "from-config", true},
		{"env sets a bool flag", map[string]string{"MEMPO_FORCE": "true", "MEMPO_OUT": "e"}, nil, 1, 10, "e", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			code, spec, rows, stderr := run(t, tt.args...)
			if code != ExitOK {
				t.Fatalf("Main = %d: %s", code, stderr)
			}
			if spec.Seed != tt.wantSeed || rows != tt.wantRows || spec.Out != tt.wantOut || spec.Force != tt.wantForce {
				t.Errorf("seed %d rows %d out %q force %v, want %d %d %q %v",
					spec.Seed, rows, spec.Out, spec.Force, tt.wantSeed, tt.wantRows, tt.wantOut, tt.wantForce)
			}
		})
	}
}

func TestConfigErrors(t *testing.T) {
	tests := []struct {
		name, body, msg string
	}{
		{"unknown key", `{"seed": 3, "sede": 4}`, `unknown key "sede"`},
		{"nested config", `{"config": "other.json"}`, `unknown key "config"`},
		{"bad value", `{"seed": "three"}`, `key "seed"`},
		{"object value", `{"seed": {"a": 1}}`, `key "seed"`},
		{"not an object", `[1, 2]`, "want one JSON object"},
		{"truncated", `{"seed": `, "want one JSON object"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeConfig(t, tt.body)
			code, _, _, stderr := run(t, "--out", "d", "--config", path)
			if code != ExitUsage || !strings.Contains(stderr, tt.msg) || !strings.Contains(stderr, path) {
				t.Errorf("Main = %d, stderr %q; want 2 naming %s and %q", code, stderr, path, tt.msg)
			}
		})
	}
	code, _, _, stderr := run(t, "--out", "d", "--config", filepath.Join(t.TempDir(), "missing.json"))
	if code != ExitUsage || !strings.Contains(stderr, "missing.json") {
		t.Errorf("missing config file: Main = %d, stderr %q", code, stderr)
	}
}

func TestWarnUnknownEnv(t *testing.T) {
	t.Setenv("MEMPO_SEDE", "3")
	t.Setenv("MEMPO_SEED", "3")
	code, spec, _, stderr := run(t, "--out", "d")
	if code != ExitOK || spec.Seed != 3 {
		t.Fatalf("Main = %d seed %d: %s", code, spec.Seed, stderr)
	}
	if !strings.Contains(stderr, "warning: MEMPO_SEDE is set but no flag reads it") {
		t.Errorf("stderr %q, want a warning about MEMPO_SEDE", stderr)
	}
	if strings.Contains(stderr, "MEMPO_SEED is set") {
		t.Errorf("warned about a known variable: %q", stderr)
	}
}

func TestStageSpecResolves(t *testing.T) {
	code, spec, _, stderr := run(t, "--out", "d", "--shard", "1/3", "--progress", "auto", "--debug", "keyhash", "--verify", "--merge", "0")
	if code != ExitOK {
		t.Fatalf("Main = %d: %s", code, stderr)
	}
	if spec.Part != (jobs.Part{Index: 1, Count: 3}) || !spec.Verify || spec.KeyDebug == nil || spec.Log == nil {
		t.Errorf("spec = part %v verify %v keydebug %v log %v", spec.Part, spec.Verify, spec.KeyDebug, spec.Log)
	}
	// stderr is a buffer, not a terminal: auto means plain lines.
	if spec.Progress != jobs.ProgressPlain {
		t.Errorf("auto progress on a non-terminal = %v, want plain", spec.Progress)
	}
}

func TestResolvePart(t *testing.T) {
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want jobs.Part
		msg  string
	}{
		{"none", nil, nil, jobs.Part{}, ""},
		{"flag", []string{"--shard", "2/4"}, map[string]string{"JOB_COMPLETION_INDEX": "1"}, jobs.Part{Index: 2, Count: 4}, ""},
		{"kubernetes", []string{"--shard-count", "4"}, map[string]string{"JOB_COMPLETION_INDEX": "3"}, jobs.Part{Index: 3, Count: 4}, ""},
		{"slurm from 1", nil, map[string]string{"SLURM_ARRAY_TASK_ID": "2", "SLURM_ARRAY_TASK_MIN": "1", "SLURM_ARRAY_TASK_COUNT": "3"}, jobs.Part{Index: 1, Count: 3}, ""},
		{"index without count", nil, map[string]string{"JOB_COMPLETION_INDEX": "0"}, jobs.Part{}, "--shard-count"},
		{"index out of range", []string{"--shard-count", "2"}, map[string]string{"JOB_COMPLETION_INDEX": "2"}, jobs.Part{}, "JOB_COMPLETION_INDEX=2"},
		{"count without index", []string{"--shard-count", "2"}, nil, jobs.Part{}, "without a part index"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got jobs.Part
			var err error
			a := &cli.App{Flags: Bind(nil, StageFlags()).cli(), Action: func(c *cli.Context) error {
				got, err = resolvePart(c, func(k string) (string, bool) { v, ok := tt.env[k]; return v, ok })
				return nil
			}}
			if rerr := a.Run(append([]string{"x"}, tt.args...)); rerr != nil {
				t.Fatal(rerr)
			}
			if tt.msg != "" {
				if !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), tt.msg) {
					t.Errorf("resolvePart = %v, want ErrUsage mentioning %q", err, tt.msg)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("resolvePart = %v, %v, want %v", got, err, tt.want)
			}
		})
	}
}

func TestFlagsDocumented(t *testing.T) {
	for _, f := range append(Bind(nil, StageFlags()).cli(), ConfigFlag) {
		d, ok := f.(cli.DocGenerationFlag)
		c, ok2 := f.(cli.CategorizableFlag)
		if !ok || !ok2 || d.GetUsage() == "" || c.GetCategory() == "" {
			t.Errorf("flag --%s lacks usage or category", f.Names()[0])
		}
	}
	var spec jobs.Spec
	var rows int
	a, stdout, _ := testApp(&spec, &rows, nil)
	if code := Main(a, []string{"mempo-test", "--help"}); code != ExitOK {
		t.Fatalf("--help exit %d", code)
	}
	for _, want := range []string{"[$MEMPO_OUT]", "[$MEMPO_SHARD_COUNT]", "(default: 1)", "Scale-out"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("--help lacks %q:\n%s", want, stdout.String())
		}
	}
}
