package torchflag

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/mempo/mempo/cmd/internal/app"
	"github.com/mempo/mempo/model/torch"
	"github.com/mempo/mempo/train/collective"
)

// TestAttentionFlag: --attention takes auto, eager and sdpa from the command line or
// --config, spells the default auto as "" (one cache key for both), and refuses
// anything else naming the choices.
func TestAttentionFlag(t *testing.T) {
	config := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(config, []byte(`{"attention": "sdpa"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		args []string
		code int
		want string // the field after the flags resolve, or the error
	}{
		{nil, app.ExitOK, ""},
		{[]string{"--attention", "auto"}, app.ExitOK, ""},
		{[]string{"--attention", "eager"}, app.ExitOK, "eager"},
		{[]string{"--config", config}, app.ExitOK, "sdpa"},
		{[]string{"--attention", "flash"}, app.ExitUsage, `--attention: "flash": want auto, eager or sdpa`},
	}
	for _, tt := range tests {
		attention := ""
		a := app.New("stage", "", app.Bind(nil, []app.Flag{Attention(&attention)}), func(*cli.Context) error { return nil })
		var stderr strings.Builder
		a.Writer, a.ErrWriter = io.Discard, &stderr
		code := app.Main(a, append([]string{"stage"}, tt.args...))
		if code != tt.code {
			t.Errorf("stage %q = exit %d (%s), want %d", tt.args, code, stderr.String(), tt.code)
		} else if code == app.ExitOK && attention != tt.want {
			t.Errorf("stage %q: attention = %q, want %q", tt.args, attention, tt.want)
		} else if code != app.ExitOK && !strings.Contains(stderr.String(), tt.want) {
			t.Errorf("stage %q: stderr %q, want it to mention %q", tt.args, stderr.String(), tt.want)
		}
	}
}

// TestDeviceRefusedAtFlagTime: a device this binary cannot use stops the command as its
// flags resolve, before the action, whether the command line, MEMPO_DEVICE or --config
// names it. On the CPU build (make test) that is every CUDA device.
func TestDeviceRefusedAtFlagTime(t *testing.T) {
	if torch.CUDABuilt() {
		t.Skip("linked against a CUDA libtorch; the CPU-only refusal is not what it prints")
	}
	config := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(config, []byte(`{"device": "cuda"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	const cpuOnly = `--device: torch: device "cuda": this binary is linked against a CPU-only libtorch; to run on a GPU, build the CUDA binaries with LIBTORCH=python (a Python whose torch has CUDA) or 'make build CUDA=1'`
	tests := []struct {
		name string
		args []string
		env  string
		code int
		msg  string
	}{
		{"cpu", []string{"--device", "cpu"}, "", app.ExitOK, ""},
		{"typo", []string{"--device", "gpu"}, "", app.ExitUsage, `--device: "gpu": want cpu, cuda or cuda:N`},
		{"flag", []string{"--device", "cuda"}, "", app.ExitFailure, cpuOnly},
		{"index", []string{"--device", "cuda:1"}, "", app.ExitFailure, `device "cuda:1": this binary is linked against a CPU-only libtorch`},
		{"environment", nil, "cuda", app.ExitFailure, cpuOnly},
		{"config", []string{"--config", config}, "", app.ExitFailure, cpuOnly},
		{"flag overrides config", []string{"--config", config, "--device", "cpu"}, "", app.ExitOK, ""},
		// A merge runs no model: the GPU workers' --device is taken as it is.
		{"merge", []string{"--device", "cuda", "--merge", "2"}, "", app.ExitOK, ""},
		{"merge, typo", []string{"--device", "gpu", "--merge", "2"}, "", app.ExitUsage, `--device: "gpu": want cpu, cuda or cuda:N`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("MEMPO_DEVICE", tt.env)
			if tt.env == "" {
				os.Unsetenv("MEMPO_DEVICE")
			}
			device, ran := "cpu", false
			flags := append([]app.Flag{Device(&device)}, app.Unbound(app.MergeFlag)...)
			a := app.New("stage", "", app.Bind(nil, flags), func(*cli.Context) error { ran = true; return nil })
			var stderr strings.Builder
			a.Writer, a.ErrWriter = io.Discard, &stderr
			code := app.Main(a, append([]string{"stage"}, tt.args...))
			if code != tt.code || !strings.Contains(stderr.String(), tt.msg) {
				t.Errorf("stage %q = exit %d, stderr %q; want %d mentioning %q", tt.args, code, stderr.String(), tt.code, tt.msg)
			}
			if ran != (tt.code == app.ExitOK) {
				t.Errorf("stage %q: action ran = %v, want %v", tt.args, ran, tt.code == app.ExitOK)
			}
		})
	}
}

// TestJoinRanks: a --world-size the launcher's variables contradict, or that no launcher
// backs, is refused before any rendezvous; without a launcher a process trains alone,
// and under one of WORLD_SIZE=1 too.
func TestJoinRanks(t *testing.T) {
	for _, tt := range []struct {
		name  string
		env   map[string]string
		world int
		want  int
		bad   bool
	}{
		{"alone", nil, 0, 1, false},
		{"alone, --world-size 1", nil, 1, 1, false},
		{"--world-size 2 without a launcher", nil, 2, 0, true},
		{"a launcher of one", map[string]string{"WORLD_SIZE": "1", "RANK": "0"}, 0, 1, false},
		{"--world-size 2 under WORLD_SIZE=3", map[string]string{"WORLD_SIZE": "3", "RANK": "0", "MASTER_ADDR": "127.0.0.1"}, 2, 0, true},
		{"RANK outside the world", map[string]string{"WORLD_SIZE": "2", "RANK": "2", "MASTER_ADDR": "127.0.0.1"}, 0, 0, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			for _, k := range []string{"WORLD_SIZE", "RANK", "MASTER_ADDR", "MASTER_PORT"} {
				t.Setenv(k, tt.env[k])
				if tt.env[k] == "" {
					os.Unsetenv(k)
				}
			}
			world, g, err := JoinRanks(tt.world, time.Second)
			if g != nil {
				g.Close()
				t.Fatal("JoinRanks opened a group")
			}
			if tt.bad {
				if !errors.Is(err, collective.ErrConfig) {
					t.Errorf("JoinRanks(%d) = %d, %v; want collective.ErrConfig", tt.world, world, err)
				}
				return
			}
			if err != nil || world != tt.want {
				t.Errorf("JoinRanks(%d) = %d, %v; want %d", tt.world, world, err, tt.want)
			}
		})
	}
}
