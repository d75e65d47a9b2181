package audit

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/mempo/mempo/format"
	"github.com/mempo/mempo/format/formattest"
)

// inspectRollouts are five rollouts rows of three questions with empty, short, negative
// and very large token ids, for the column statistics.
func inspectRollouts() []format.Rollout {
	return []format.Rollout{
		{UID: "p0", Sample: 0, Turn: 0, PromptIDs: []int32{1, 2, 3}, ResponseIDs: []int32{10, 11, 12, 13},
			SamplingLogprobs: []float32{-0.5, -1.25, -0.125, 0}, MemStart: 0, MemEnd: 2, Response: "<mem>a</mem><search>x</search>",
			Memory: "a", Action: "search", Query: "x", Observation: "<information>Doc 1(Title: X) y</information>", ObservationIDs: []int32{30, 31, 32},
			Finish: "stop", PolicyDigest: "abc"},
		{UID: "p0", Sample: 0, Turn: 1, PromptIDs: []int32{1, 2}, ResponseIDs: []int32{20}, SamplingLogprobs: []float32{-3},
			Action: "answer", Query: "Paris", Finish: "stop", PolicyDigest: "abc"},
		{UID: "p0", Sample: 1, Turn: 0, Action: "invalid", Finish: "length", PolicyDigest: "abc"},
		{UID: "p1", Sample: 0, Turn: 0, PromptIDs: []int32{-1, 1 << 30}, ResponseIDs: []int32{5, 6}, SamplingLogprobs: []float32{-1e-8, -40},
			MemStart: 0, MemEnd: 2, Memory: "ünïcode", Action: "answer", Query: "a; b", Finish: "max_turns", PolicyDigest: "def"},
		{UID: "p2", Sample: 3, Turn: 15, Finish: "max_turns"},
	}
}

func TestInspect(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ds")
	rows := inspectRollouts()
	if _, err := formattest.WriteDataset(dir, "test", [][]format.Rollout{rows[:3], rows[3:]}, format.WithRowGroupRows(2)); err != nil {
		t.Fatal(err)
	}
	s, err := Inspect(dir, 3)
	if err != nil {
		t.Fatalf("Inspect(%s) error: %v", dir, err)
	}
	if s.Kind != format.KindRollouts || s.Rows != 5 || len(s.Shards) != 2 || len(s.Head) != 3 {
		t.Errorf("Inspect = kind %s, %d rows, %d shards, %d head rows, want rollouts, 5, 2, 3", s.Kind, s.Rows, len(s.Shards), len(s.Head))
	}
	col := func(name string) ColumnStats {
		for _, c := range s.Columns {
			if c.Name == name {
				return c
			}
		}
		t.Fatalf("no column %q in %v", name, s.Columns)
		return ColumnStats{}
	}
	opts := cmpopts.IgnoreUnexported(NumStats{})
	// inspectRollouts: turns 0,1,0,0,15; prompt_ids lengths 3,2,0,2,0 with values 1,2,3,1,2,-1,2^30.
	tests := []struct {
		name string
		got  any
		want any
	}{
		{"turn values", col("turn").Values, &NumStats{Count: 5, Min: 0, Max: 15, Mean: 3.2}},
		{"prompt_ids lengths", col("prompt_ids").Lengths, &NumStats{Count: 5, Min: 0, Max: 3, Mean: 1.4}},
		{"prompt_ids values", col("prompt_ids").Values, &NumStats{Count: 7, Min: -1, Max: 1 << 30, Mean: float64(1+2+3+1+2-1+(1<<30)) / 7}},
		{"uid distinct", col("uid").Distinct, 3},
		{"action distinct", col("action").Distinct, 4}, // search, answer, invalid, ""
	}
	for _, tt := range tests {
		if diff := cmp.Diff(tt.want, tt.got, opts, cmpopts.EquateApprox(0, 1e-9)); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tt.name, diff)
		}
	}
	var first map[string]any
	if err := json.Unmarshal(mustJSON(t, s.Head[0]), &first); err != nil {
		t.Fatal(err)
	}
	if first["uid"] != "p0" || first["action"] != "search" {
		t.Errorf("head[0] = %v, want uid p0, action search", first)
	}

	var text bytes.Buffer
	if err := s.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"kind       rollouts (schema version 2)", "part-00001.parquet", "len min 0 max 3 mean 1.4", "distinct 3", "first 3 rows", "  uid: \"p0\"", `response: "<mem>a</mem><search>x</search>"`} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("WriteText output lacks %q:\n%s", want, text.String())
		}
	}
	// The manifest's figures are listed by name, and the phases of its timings.
	s.Metrics = map[string]float64{"memories_all": 28, "auc_r_mem_all_vs_none": 0.91254}
	s.Timings.Phases = map[string]float64{"old_pass": 8.18, "memory_pass": 12.44}
	text.Reset()
	if err := s.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	if got := text.String(); !regexp.MustCompile(`figure +value\nauc_r_mem_all_vs_none +0\.9125\nmemories_all +28\n`).MatchString(got) {
		t.Errorf("WriteText output lacks the sorted figures:\n%s", got)
	}
	if got := text.String(); !regexp.MustCompile(`phases +memory_pass 12\.4s, old_pass 8\.2s\n`).MatchString(got) {
		t.Errorf("WriteText output lacks the sorted phases:\n%s", got)
	}
	var round Summary
	if err := json.Unmarshal(mustJSON(t, s), &round); err != nil {
		t.Fatalf("JSON output does not parse: %v", err)
	}
	if round.Rows != 5 || len(round.Columns) != len(s.Columns) {
		t.Errorf("JSON round trip: %d rows, %d columns, want 5, %d", round.Rows, len(round.Columns), len(s.Columns))
	}
}

func TestInspectCountsNaN(t *testing.T) {
	rows := []format.Score{{UID: "p0", Reward: 1}, {UID: "p0", Sample: 1, Reward: float32(math.NaN())}, {UID: "p1"}, {UID: "p2", Reward: 0.5}}
	dir := filepath.Join(t.TempDir(), "ds")
	if _, err := formattest.WriteDataset(dir, "test", [][]format.Score{rows}); err != nil {
		t.Fatal(err)
	}
	s, err := Inspect(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range s.Columns {
		if c.Name == "reward" && (c.Values.NaN != 1 || c.Values.Count != 3 || c.Values.Max != 1) {
			t.Errorf("reward stats = %+v, want 1 NaN apart from 3 values with max 1", c.Values)
		}
	}
	if len(s.Head) != 0 {
		t.Errorf("head 0 gave %d rows", len(s.Head))
	}
}

// TestInspectEmptyShard: a dataset whose only shard holds no rows still reports the
// shard's schema and a column for each field.
func TestInspectEmptyShard(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ds")
	if _, err := formattest.WriteDataset(dir, "test", [][]format.Score{{}}); err != nil {
		t.Fatal(err)
	}
	s, err := Inspect(dir, 1)
	if err != nil {
		t.Fatal(err)
	}
	want, _, _ := format.Schema(format.KindScores)
	if len(s.Schema) != want.NumFields() || len(s.Columns) != want.NumFields() || s.Rows != 0 {
		t.Errorf("Inspect(empty shard) = %d fields, %d columns, %d rows; want the scores schema's %d and no rows",
			len(s.Schema), len(s.Columns), s.Rows, want.NumFields())
	}
}

func TestInspectBadInput(t *testing.T) {
	root := t.TempDir()
	if _, err := Inspect(root, 1); !errors.Is(err, format.ErrNotDataset) {
		t.Errorf("Inspect(dir without manifest) = %v, want ErrNotDataset", err)
	}
	dir := filepath.Join(root, "ds")
	adv := []format.Advantage{{UID: "p0", Reward: 1}, {UID: "p0", Sample: 1}, {UID: "p1", Turn: 1}}
	d, err := formattest.WriteDataset(dir, "test", [][]format.Advantage{adv[:2], adv[2:]})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(d.Path(0))
	b[10] ^= 1
	os.WriteFile(d.Path(0), b, 0o644)
	if _, err := Inspect(dir, 1); !errors.Is(err, format.ErrCorrupt) || !strings.Contains(err.Error(), d.Path(0)) {
		t.Errorf("Inspect(corrupt shard) = %v, want ErrCorrupt naming %s", err, d.Path(0))
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
