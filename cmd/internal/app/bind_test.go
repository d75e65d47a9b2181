package app

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/urfave/cli/v2"

	"github.com/mempo/mempo/jobs"
)

// testConfig stands for a stage Config: nested objects, a string enum, a field no flag
// sets, a pointer that is nil by default, and JSON names unlike the flag names.
type testConfig struct {
	Objective testObjective `json:"objective"`
	Mode      testMode      `json:"mode"`
	Temp      float64       `json:"temperature"`
	MaxTurns  int           `json:"max_turns"`
	Device    string        `json:"device"`
	Chunk     int           `json:"chunk"` // no flag sets it
	Protocol  *testProtocol `json:"protocol,omitempty"`
	Tags      []string      `json:"tags"`
	Hidden    int           `json:"-"`
}

type testObjective struct {
	Clip struct {
		Low  float64 `json:"clip_low"`
		High float64 `json:"clip_high"`
	} `json:"clip"`
	KLCoef float64 `json:"kl_coef"`
}

type testProtocol struct {
	Open  string `json:"open"`
	Close string `json:"close"`
}

type testMode string

func parseMode(s string) (testMode, error) {
	if s != "fast" && s != "exact" {
		return "", fmt.Errorf("mode %q: want fast or exact", s)
	}
	return testMode(s), nil
}

func defaultTestConfig() testConfig {
	c := testConfig{Mode: "exact", Temp: 1, MaxTurns: 16, Device: "cpu", Chunk: 256}
	c.Objective.Clip.Low, c.Objective.Clip.High, c.Objective.KLCoef = 0.2, 0.2, 0.001
	return c
}

// testCommand binds every flag of a testConfig as a stage command would.
type testCommand struct {
	cfg     testConfig
	threads int // set through Then
}

func (tc *testCommand) flags() *Flags {
	cfg := &tc.cfg
	var n int
	return Bind(cfg, StageFlags(), []Flag{
		Float64(&cfg.Objective.Clip.Low, cli.Float64Flag{Name: "clip-low", Category: "Loss", Usage: "clip below"}),
		Float64(&cfg.Objective.Clip.High, cli.Float64Flag{Name: "clip-high", Category: "Loss", Usage: "clip above"}),
		Float64(&cfg.Objective.KLCoef, cli.Float64Flag{Name: "kl-coef", Category: "Loss", Usage: "KL weight"}),
		Enum(&cfg.Mode, cli.StringFlag{Name: "mode", Category: "Loss", Usage: "fast or exact"}, parseMode),
		Float64(&cfg.Temp, cli.Float64Flag{Name: "temperature", Category: "Loss", Usage: "temperature"}),
		Int(&cfg.MaxTurns, cli.IntFlag{Name: "max-turns", Category: "Loss", Usage: "turns"}).Check(AtLeast(&cfg.MaxTurns, 1)),
		String(&cfg.Device, cli.StringFlag{Name: "device", Category: "Runtime", Usage: "device"}),
		Strings(&cfg.Tags, cli.StringSliceFlag{Name: "tag", Category: "Runtime", Usage: "tags"}),
		Load(&cfg.Protocol, cli.StringFlag{Name: "protocol", Category: "Runtime", Usage: "protocol FILE"}, func(path string) (*testProtocol, error) {
			if path == "missing" {
				return nil, errors.New("open missing: no such file")
			}
			return &testProtocol{Open: "<" + path + ">"}, nil
		}),
		Int(&n, cli.IntFlag{Name: "threads", Category: "Runtime", Usage: "threads"}).Then(func() error {
			if n < 0 {
				return Usage(fmt.Errorf("threads %d, want >= 0", n))
			}
			tc.threads = n
			return nil
		}),
	})
}

// runTest runs a fresh testCommand with args and returns it, the exit code and stderr.
func runTest(t *testing.T, args ...string) (*testCommand, int, string) {
	t.Helper()
	tc := &testCommand{cfg: defaultTestConfig()}
	a := New("mempo-test", "", tc.flags(), func(*cli.Context) error { return nil })
	var stderr strings.Builder
	a.Writer, a.ErrWriter = io.Discard, &stderr
	code := Main(a, append([]string{"mempo-test", "--out", "d"}, args...))
	return tc, code, stderr.String()
}

func TestBindDefaultsFromConfig(t *testing.T) {
	tc := &testCommand{cfg: defaultTestConfig()}
	tc.cfg.Tags = []string{"a", "b"}
	a := New("mempo-test", "", tc.flags(), func(*cli.Context) error { return nil })
	var stdout strings.Builder
	a.Writer = &stdout
	if code := Main(a, []string{"mempo-test", "--help"}); code != ExitOK {
		t.Fatalf("--help exit %d", code)
	}
	for _, want := range []string{
		"--clip-low value     clip below (default: 0.2)", `--mode value         fast or exact (default: "exact")`,
		"--max-turns value    turns (default: 16)", `device (default: "cpu")`,
		`(default: "a", "b")`, "[$MEMPO_CLIP_LOW]",
	} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("--help lacks %q:\n%s", want, stdout.String())
		}
	}
}

func TestBindStores(t *testing.T) {
	want := defaultTestConfig()
	want.Objective.Clip.Low, want.Mode, want.MaxTurns, want.Tags = 0.1, "fast", 4, []string{"x", "y"}
	want.Protocol = &testProtocol{Open: "<p.json>"}
	tc, code, stderr := runTest(t, "--clip-low", "0.1", "--mode", "fast", "--max-turns", "4", "--tag", "x", "--tag", "y",
		"--protocol", "p.json", "--threads", "3")
	if code != ExitOK {
		t.Fatalf("Main = %d: %s", code, stderr)
	}
	if diff := cmp.Diff(want, tc.cfg); diff != "" {
		t.Errorf("config (-want +got):\n%s", diff)
	}
	if tc.threads != 3 {
		t.Errorf("Then saw threads %d, want 3", tc.threads)
	}
}

func TestBindErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want int
		msg  string
	}{
		{"bad enum", []string{"--mode", "slow"}, ExitUsage, `--mode: mode "slow": want fast or exact`},
		{"bad number", []string{"--clip-low", "x"}, ExitUsage, "clip-low"},
		{"load failure keeps its class", []string{"--protocol", "missing"}, ExitFailure, "--protocol: open missing"},
		{"then", []string{"--threads", "-1"}, ExitUsage, "--threads: threads -1"},
		{"inf", []string{"--temperature", "Inf"}, ExitUsage, "--temperature: +Inf: want a finite number"},
		{"nan", []string{"--clip-low", "NaN"}, ExitUsage, "--clip-low: NaN: want a finite number"},
		{"negative inf", []string{"--kl-coef", "-inf"}, ExitUsage, "--kl-coef: -Inf"},
		{"check", []string{"--max-turns", "0"}, ExitUsage, "--max-turns: 0: want at least 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, code, stderr := runTest(t, tt.args...)
			if code != tt.want || !strings.Contains(stderr, tt.msg) {
				t.Errorf("Main(%q) = %d, stderr %q; want %d mentioning %q", tt.args, code, stderr, tt.want, tt.msg)
			}
		})
	}
}

// TestConfigReplay: a config as the stage records it, fed back through --config,
// resolves to the same config, the fields no flag sets included.
func TestConfigReplay(t *testing.T) {
	want := defaultTestConfig()
	want.Objective.Clip.Low, want.Objective.KLCoef, want.Mode, want.Temp = 0.1, 0, "fast", 0.7
	want.MaxTurns, want.Device, want.Chunk, want.Tags = 3, "cuda:1", 64, []string{"t"}
	want.Protocol = &testProtocol{Open: "<m>", Close: "</m>"}
	data, err := jobs.CanonicalJSON(want)
	if err != nil {
		t.Fatal(err)
	}
	got, code, stderr := runTest(t, "--config", writeConfig(t, string(data)))
	if code != ExitOK {
		t.Fatalf("Main = %d: %s", code, stderr)
	}
	if diff := cmp.Diff(want, got.cfg); diff != "" {
		t.Errorf("replayed config (-want +got):\n%s", diff)
	}
}

func TestConfigPrecedence(t *testing.T) {
	config := writeConfig(t, `{"objective": {"clip": {"clip_low": 0.3, "clip_high": 0.4}}, "max_turns": 5, "temperature": 0.5, "device": "cuda", "chunk": 8, "mode": "fast"}`)
	tests := []struct {
		name string
		env  map[string]string
		args []string
		want func(*testConfig)
	}{
		{"config", nil, nil, func(c *testConfig) {}},
		{"flag over config field", nil, []string{"--clip-low", "0.1", "--max-turns", "9"}, func(c *testConfig) {
			c.Objective.Clip.Low, c.MaxTurns = 0.1, 9
		}},
		{"env over config field", map[string]string{"MEMPO_MAX_TURNS": "7", "MEMPO_TEMPERATURE": "0.9"}, nil, func(c *testConfig) {
			c.MaxTurns, c.Temp = 7, 0.9
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			want := defaultTestConfig()
			want.Objective.Clip.Low, want.Objective.Clip.High, want.MaxTurns, want.Temp = 0.3, 0.4, 5, 0.5
			want.Device, want.Chunk, want.Mode = "cuda", 8, "fast"
			tt.want(&want)
			tc, code, stderr := runTest(t, append([]string{"--config", config}, tt.args...)...)
			if code != ExitOK {
				t.Fatalf("Main = %d: %s", code, stderr)
			}
			if diff := cmp.Diff(want, tc.cfg); diff != "" {
				t.Errorf("config (-want +got):\n%s", diff)
			}
		})
	}
}

func TestConfigKeys(t *testing.T) {
	tests := []struct {
		name, body string
		want       func(*testConfig)
		msg        string // an error naming this, instead
	}{
		{"flag name", `{"clip-low": 0.05, "tag": ["a", "b"]}`, func(c *testConfig) { c.Objective.Clip.Low, c.Tags = 0.05, []string{"a", "b"} }, ""},
		{"flag name beside field name", `{"clip-low": 0.05, "objective": {"clip": {"clip_low": 0.3}}}`, func(c *testConfig) { c.Objective.Clip.Low = 0.05 }, ""},
		{"flag value for a key both flag and field", `{"protocol": "p.json"}`, func(c *testConfig) { c.Protocol = &testProtocol{Open: "<p.json>"} }, ""},
		{"object for a key both flag and field", `{"protocol": {"open": "<a>"}}`, func(c *testConfig) { c.Protocol = &testProtocol{Open: "<a>"} }, ""},
		{"unknown key", `{"max_turn": 3}`, nil, `unknown key "max_turn"`},
		{"unknown nested key", `{"objective": {"clip": {"clip_lo": 0.1}}}`, nil, `key "objective": json: unknown field "clip_lo"`},
		{"wrong type", `{"max_turns": "three"}`, nil, `key "max_turns"`},
		{"field without a JSON name", `{"Hidden": 3}`, nil, `unknown key "Hidden"`},
		{"bad enum through a flag name", `{"mode": "slow"}`, nil, `--mode: mode "slow"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeConfig(t, tt.body)
			tc, code, stderr := runTest(t, "--config", path)
			if tt.msg != "" {
				if code != ExitUsage || !strings.Contains(stderr, tt.msg) {
					t.Errorf("Main = %d, stderr %q; want %d naming %q", code, stderr, ExitUsage, tt.msg)
				}
				return
			}
			if code != ExitOK {
				t.Fatalf("Main = %d: %s", code, stderr)
			}
			want := defaultTestConfig()
			tt.want(&want)
			if diff := cmp.Diff(want, tc.cfg); diff != "" {
				t.Errorf("config (-want +got):\n%s", diff)
			}
		})
	}
}
