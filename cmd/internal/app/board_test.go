package app

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/mempo/mempo/jobs"
)

func TestBoardFlags(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		args []string
		want jobs.Board
		code int
	}{
		{"unset", nil, nil, jobs.Board{}, ExitOK},
		{"flags", nil, []string{"--tb-dir", "runs/x/tb", "--tb-step", "3"}, jobs.Board{Dir: "runs/x/tb", Step: 3}, ExitOK},
		{"environment", map[string]string{"MEMPO_TB_DIR": "tb", "MEMPO_TB_STEP": "2"}, nil, jobs.Board{Dir: "tb", Step: 2}, ExitOK},
		{"config file", nil, []string{"--config", "CONFIG"}, jobs.Board{Dir: "from-config", Step: 5}, ExitOK},
		{"negative step", nil, []string{"--tb-dir", "tb", "--tb-step", "-1"}, jobs.Board{}, ExitUsage},
	}
	config := writeConfig(t, `{"tb-dir": "from-config", "tb-step": 5}`)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			args := append([]string{"--out", "d"}, tt.args...)
			if i := slices.Index(args, "CONFIG"); i >= 0 {
				args[i] = config
			}
			code, spec, _, stderr := run(t, args...)
			if code != tt.code {
				t.Fatalf("Main(%q) = %d, want %d: %s", args, code, tt.code, stderr)
			}
			if code == ExitOK && spec.Board != tt.want {
				t.Errorf("Main(%q): Board = %+v, want %+v", args, spec.Board, tt.want)
			}
			for _, v := range []string{"MEMPO_TB_DIR", "MEMPO_TB_STEP"} {
				if strings.Contains(stderr, v+" is set but no flag reads it") {
					t.Errorf("stderr %q: %s must be a known variable", stderr, v)
				}
			}
		})
	}
}

// TestStageSpecBoard: --tb-dir and --tb-step (here MEMPO_TB_STEP) resolve into the
// spec's Board, and resolving them creates no directory.
func TestStageSpecBoard(t *testing.T) {
	var got jobs.Spec
	train := Command(&cli.Command{Name: "train"}, Bind(nil, Unbound(OutFlag, ProgressFlag, LogLevelFlag, TBDirFlag, TBStepFlag)), func(c *cli.Context) error {
		var err error
		got, err = StageSpec(c)
		return err
	})
	a := &cli.App{Name: "tool", Commands: []*cli.Command{train}}
	Prepare(a)
	dir := filepath.Join(t.TempDir(), "tb")
	t.Setenv("MEMPO_TB_STEP", "7")
	var stderr strings.Builder
	a.ErrWriter = &stderr
	if code := Main(a, []string{"tool", "train", "--out", "d", "--tb-dir", dir}); code != ExitOK {
		t.Fatalf("tool train = %d: %s", code, stderr.String())
	}
	if want := (jobs.Board{Dir: dir, Step: 7}); got.Board != want {
		t.Errorf("train's Board = %+v, want %+v", got.Board, want)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("Stat(%s) = %v: resolving the flags must not create the log dir", dir, err)
	}
}
