package jobs

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/mempo/mempo/format"
)

func TestHashLineQuoting(t *testing.T) {
	tests := []struct {
		name   string
		fields []string
		want   string
	}{
		{"plain", []string{"runs/a/prompts", "sha256:ab"}, "input runs/a/prompts sha256:ab\n"},
		{"space", []string{"my dir/x"}, "input \"my dir/x\"\n"},
		{"empty", []string{""}, "input \"\"\n"},
		{"newline", []string{"a\nb"}, "input \"a\\nb\"\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var debug bytes.Buffer
			h := newHash("t", &debug)
			h.Line("input", tt.fields...)
			got := debug.String()
			if want := "HASH[t]: " + quoteGo(tt.want) + "\n"; got != want {
				t.Errorf("debug = %q, want %q", got, want)
			}
		})
	}
	// Two field lists that would join to the same text must hash differently.
	a, b := newHash("a", nil), newHash("b", nil)
	a.Line("input", "x y", "z")
	b.Line("input", "x", "y z")
	if a.Sum() == b.Sum() {
		t.Errorf("Line(x y, z) and Line(x, y z) hash alike")
	}
}

func quoteGo(s string) string {
	var b strings.Builder
	b.WriteString(`"`)
	for _, r := range s {
		switch r {
		case '\n':
			b.WriteString(`\n`)
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteString(`"`)
	return b.String()
}

func TestKeyPreimage(t *testing.T) {
	var debug bytes.Buffer
	spec := testSpec(t.TempDir())
	spec.KeyDebug = &debug
	r, err := newRunner(spec)
	if err != nil {
		t.Fatal(err)
	}
	k := r.key(Part{})
	got := debug.String()
	for _, want := range []string{
		`"stage test\n"`, `"code ` + CodeVersion(), `"schema probe@1\n"`, `"config `,
		`"input prompts sha256:00\n"`, `"seed 7\n"`, `"shards 5\n"`, "= " + k.String(),
	} {
		if !strings.Contains(got, want) {
			t.Errorf("preimage lacks %s:\n%s", want, got)
		}
	}
	if strings.Contains(got, "part") {
		t.Errorf("whole-plan preimage has a part line:\n%s", got)
	}
	if strings.Contains(got, "in/prompts") {
		t.Errorf("preimage keys an input's path:\n%s", got)
	}
}

// TestKeySpecLines checks the preimage every key starts with — a checkpoint's has
// exactly these lines, a dataset's adds its shard plan after them — in order.
func TestKeySpecLines(t *testing.T) {
	var debug bytes.Buffer
	conf, err := CanonicalJSON(map[string]any{"lr": 1e-6})
	if err != nil {
		t.Fatal(err)
	}
	spec := KeySpec{Stage: "update", Schema: CheckpointSchema, Config: conf, Seed: -3,
		Inputs: []format.Input{{Name: "policy", Path: "runs/a/policy", Digest: "checkpoint:ab"}, {Name: "rollouts", Path: "r", Digest: "dataset:cd"}}}
	k := spec.Key(&debug)
	sum := sha256.Sum256(conf)
	var want strings.Builder
	for _, line := range []string{"stage update\n", "code " + CodeVersion() + "\n", "schema checkpoint@1\n",
		"config " + hex.EncodeToString(sum[:]) + "\n", "input policy checkpoint:ab\n", "input rollouts dataset:cd\n", "seed -3\n"} {
		fmt.Fprintf(&want, "HASH[stage update]: %q\n", line)
	}
	fmt.Fprintf(&want, "HASH[stage update] = %s\n", k)
	if diff := cmp.Diff(want.String(), debug.String()); diff != "" {
		t.Errorf("KeySpec preimage (-want +got):\n%s", diff)
	}
	spec.Inputs[0].Path = "elsewhere"
	if got := spec.Key(nil); got != k {
		t.Errorf("Key after moving an input = %s, want %s", got, k)
	}
	// A step that keys a format version of its own in place of the code version.
	debug.Reset()
	spec.Code = "index format 2"
	if got := spec.Key(&debug); got == k || !strings.Contains(debug.String(), `"code \"index format 2\"\n"`) ||
		strings.Contains(debug.String(), CodeVersion()) {
		t.Errorf("Key with Code %q = %s (the code version's %s), preimage:\n%s", spec.Code, got, k, debug.String())
	}
}

func TestKeyChanges(t *testing.T) {
	base := testSpec("out")
	key := func(t *testing.T, s Spec, p Part) Key {
		t.Helper()
		r, err := newRunner(s)
		if err != nil {
			t.Fatal(err)
		}
		return r.key(p)
	}
	k0 := key(t, base, Part{})
	tests := []struct {
		name   string
		change func(*Spec)
		part   Part
		same   bool
	}{
		{"identical", func(*Spec) {}, Part{}, true},
		{"out, force, verify and progress are not keyed", func(s *Spec) {
			s.Out, s.Force, s.Verify, s.Progress = "elsewhere", true, true, ProgressPlain
		}, Part{}, true},
		{"config map order", func(s *Spec) { s.Config = map[string]any{"width": 3, "rows": 10} }, Part{}, true},
		{"config value", func(s *Spec) { s.Config = map[string]any{"rows": 11, "width": 3} }, Part{}, false},
		{"seed", func(s *Spec) { s.Seed = 8 }, Part{}, false},
		{"input digest", func(s *Spec) { s.Inputs = []format.Input{{Name: "prompts", Path: "in/prompts", Digest: "sha256:01"}} }, Part{}, false},
		{"input path is not keyed: moving an input is no change", func(s *Spec) {
			s.Inputs = []format.Input{{Name: "prompts", Path: "moved/prompts", Digest: "sha256:00"}}
		}, Part{}, true},
		{"input name", func(s *Spec) { s.Inputs = []format.Input{{Name: "questions", Path: "in/prompts", Digest: "sha256:00"}} }, Part{}, false},
		{"shards", func(s *Spec) { s.Shards = 6 }, Part{}, false},
		{"schema", func(s *Spec) { s.SchemaVersion = 2 }, Part{}, false},
		{"stage", func(s *Spec) { s.Stage = "other" }, Part{}, false},
		{"part", func(*Spec) {}, Part{Index: 0, Count: 2}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := base
			tt.change(&s)
			if got := key(t, s, tt.part) == k0; got != tt.same {
				t.Errorf("key unchanged = %v, want %v", got, tt.same)
			}
		})
	}
}

func TestCanonicalJSON(t *testing.T) {
	type cfg struct {
		B int     `json:"b"`
		A float64 `json:"a"`
	}
	got, err := CanonicalJSON(cfg{B: 2, A: 0.1})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"a":0.1,"b":2}`; string(got) != want {
		t.Errorf("CanonicalJSON = %s, want %s", got, want)
	}
}

func TestParsePart(t *testing.T) {
	tests := []struct {
		in   string
		want Part
		ok   bool
	}{
		{"0/4", Part{0, 4}, true},
		{"3/4", Part{3, 4}, true},
		{"4/4", Part{}, false},
		{"-1/4", Part{}, false},
		{"1/0", Part{}, false},
		{"1", Part{}, false},
		{"a/b", Part{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParsePart(tt.in)
			if (err == nil) != tt.ok || got != tt.want {
				t.Errorf("ParsePart(%q) = %v, %v, want %v (ok %v)", tt.in, got, err, tt.want, tt.ok)
			}
		})
	}
}

func TestPartRangeCoversPlan(t *testing.T) {
	for _, shards := range []int{0, 1, 5, 7, 16} {
		for n := 1; n <= 6; n++ {
			next := 0
			for i := range n {
				lo, hi := Part{i, n}.Range(shards)
				if lo != next || hi < lo {
					t.Fatalf("Part{%d,%d}.Range(%d) = [%d,%d), want start %d", i, n, shards, lo, hi, next)
				}
				next = hi
			}
			if next != shards {
				t.Errorf("parts of %d over %d shards end at %d", n, shards, next)
			}
		}
	}
}
