package ingest

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/mempo/mempo/format"
	"github.com/mempo/mempo/jobs"
)

var fixtures = []string{filepath.Join("testdata", "search_r1.parquet"), filepath.Join("testdata", "verl_plain.parquet")}

func readDataset(t *testing.T, dir string) []format.Prompt {
	t.Helper()
	rows, err := format.ReadDataset[format.Prompt](dir)
	if err != nil {
		t.Fatalf("read %s: %v", dir, err)
	}
	return rows
}

func TestRunImportsFixtures(t *testing.T) {
	out := filepath.Join(t.TempDir(), "prompts")
	cfg := RunConfig{Config: Config{K: 1}, Inputs: fixtures, ShardRows: 4}
	res, err := Run(context.Background(), cfg, jobs.Spec{Out: out})
	if err != nil {
		t.Fatal(err)
	}
	m := res.Manifest
	if m.Kind != format.KindPrompts || m.Stage != Stage {
		t.Errorf("manifest kind %q stage %q, want %q %q", m.Kind, m.Stage, format.KindPrompts, Stage)
	}
	// 7 + 3 prompts at most 4 a shard: 3 shards, spread evenly in import order.
	var perShard []int64
	for _, o := range m.Outputs {
		perShard = append(perShard, o.Rows)
	}
	if diff := cmp.Diff([]int64{3, 3, 4}, perShard); diff != "" {
		t.Errorf("rows per shard (-want +got):\n%s", diff)
	}
	if got, want := string(m.Config), `{"data_source":"","files":["search_r1.parquet","verl_plain.parquet"],"k":1,"shard_rows":4,"split":""}`; got != want {
		t.Errorf("manifest config %s, want %s (inputs keyed by digest, their names in the config)", got, want)
	}
	if len(m.Inputs) != 2 || m.Inputs[0].Path != fixtures[0] || !strings.HasPrefix(m.Inputs[1].Digest, "sha256:") {
		t.Errorf("manifest inputs %+v, want both fixtures by sha256, in --input order", m.Inputs)
	}

	want, _, err := Import(fixtures, cfg.Config)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, readDataset(t, out)); diff != "" {
		t.Errorf("dataset rows (-want +got):\n%s", diff)
	}
}

func TestRunCache(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "prompts")
	run := func(cfg RunConfig) *jobs.Result {
		t.Helper()
		res, err := Run(context.Background(), cfg, jobs.Spec{Out: out})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	k1 := RunConfig{Config: Config{K: 1}, Inputs: fixtures, ShardRows: DefaultShardRows}
	first := run(k1)
	if first.Hit {
		t.Fatalf("first run was a cache hit")
	}
	if again := run(k1); !again.Hit || again.Manifest.Digest() != first.Manifest.Digest() {
		t.Errorf("same files and config: Hit %v, digest %s; want a hit with digest %s", again.Hit, again.Manifest.Digest(), first.Manifest.Digest())
	}

	k2 := k1
	k2.K = 2
	res := run(k2)
	if res.Hit {
		t.Errorf("K 1 -> 2: a cache hit, want a recompute")
	}
	// search_r1: nq (0,1) (3,5), hotpotqa (2,4); verl_plain: toy (0,1); 2 dropped.
	rows := readDataset(t, out)
	if len(rows) != 4 {
		t.Fatalf("K=2: %d prompts, want 4", len(rows))
	}
	for _, p := range rows {
		if len(p.Golds) != 2 || len(p.SourceIndex) != 2 || strings.Count(p.Question, "; ") != 1 {
			t.Errorf("K=2 prompt %s: %d golds, source %v, question %q; want both objectives in one row", p.UID, len(p.Golds), p.SourceIndex, p.Question)
		}
	}

}

func TestRunInputChanges(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "prompts")
	run := func(inputs ...string) *jobs.Result {
		t.Helper()
		res, err := Run(context.Background(), RunConfig{Config: Config{K: 1}, Inputs: inputs, ShardRows: 10}, jobs.Spec{Out: out})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	q := filepath.Join(dir, "q.jsonl")
	os.WriteFile(q, []byte(`{"question": "q0", "answer": "a0"}`+"\n"), 0o644)
	first := run(q)
	if !run(q).Hit {
		t.Errorf("same file: not a cache hit")
	}
	os.WriteFile(q, []byte(`{"question": "q0", "answer": "A0"}`+"\n"), 0o644)
	changed := run(q)
	if changed.Hit || changed.Manifest.Digest() == first.Manifest.Digest() {
		t.Errorf("changed bytes: Hit %v, same digest %v; want a recompute with another digest", changed.Hit, changed.Manifest.Digest() == first.Manifest.Digest())
	}
	// The same bytes under another name are another input (its stem is the
	// data_source), so the key names the file's name too; in another directory under
	// the same name they are the same input.
	b, _ := os.ReadFile(q)
	renamed := filepath.Join(dir, "renamed.jsonl")
	os.WriteFile(renamed, b, 0o644)
	if run(renamed).Hit {
		t.Errorf("input renamed: a cache hit, want a recompute")
	}
	os.MkdirAll(filepath.Join(dir, "elsewhere"), 0o755)
	moved := filepath.Join(dir, "elsewhere", "renamed.jsonl")
	os.WriteFile(moved, b, 0o644)
	if !run(moved).Hit {
		t.Errorf("input moved to another directory: a recompute, want a cache hit")
	}
}

func TestRunDeterministic(t *testing.T) {
	// Two outputs, two processes' worth of state: the same files give the same digest.
	cfg := RunConfig{Config: Config{K: 2, OverrideDataSource: "mix", Split: "train"}, Inputs: fixtures, ShardRows: 1}
	var digests []string
	for _, name := range []string{"a", "b"} {
		res, err := Run(context.Background(), cfg, jobs.Spec{Out: filepath.Join(t.TempDir(), name)})
		if err != nil {
			t.Fatal(err)
		}
		digests = append(digests, res.Manifest.Digest())
	}
	if digests[0] != digests[1] {
		t.Errorf("digests %s and %s, want equal", digests[0], digests[1])
	}
}

func TestRunPartsMerge(t *testing.T) {
	cfg := RunConfig{Config: Config{K: 1}, Inputs: fixtures, ShardRows: 3}
	whole, err := Run(context.Background(), cfg, jobs.Spec{Out: filepath.Join(t.TempDir(), "whole")})
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "parts")
	for i := range 2 {
		if _, err := Run(context.Background(), cfg, jobs.Spec{Out: out, Part: jobs.Part{Index: i, Count: 2}}); err != nil {
			t.Fatal(err)
		}
	}
	merged, err := Run(context.Background(), cfg, jobs.Spec{Out: out, Merge: 2})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := merged.Manifest.Digest(), whole.Manifest.Digest(); got != want {
		t.Errorf("merged digest %s, want the unsharded %s", got, want)
	}
}

func TestRunErrors(t *testing.T) {
	short := writeTemp(t, "short.jsonl", `{"question": "q0", "answer": "a0"}`+"\n")
	tests := []struct {
		name string
		cfg  RunConfig
		is   error
		msg  string
	}{
		{"no input", RunConfig{Config: Config{K: 1}, ShardRows: 1}, ErrConfig, "--input"},
		{"shard rows", RunConfig{Config: Config{K: 1}, Inputs: fixtures, ShardRows: 0}, ErrConfig, "--shard-rows 0"},
		{"k", RunConfig{Config: Config{K: 0}, Inputs: fixtures, ShardRows: 1}, ErrConfig, "--k 0"},
		{"missing file", RunConfig{Config: Config{K: 1}, Inputs: []string{"testdata/nope.jsonl"}, ShardRows: 1}, os.ErrNotExist, "testdata/nope.jsonl"},
		{"no prompt", RunConfig{Config: Config{K: 2}, Inputs: []string{short}, ShardRows: 1}, ErrInput, "1 questions make no prompt of 2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "out")
			_, err := Run(context.Background(), tt.cfg, jobs.Spec{Out: out})
			if !errors.Is(err, tt.is) || !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("Run = %v, want %v mentioning %q", err, tt.is, tt.msg)
			}
			if _, err := os.Stat(out); !os.IsNotExist(err) {
				t.Errorf("a failed run left %s (stat err %v)", out, err)
			}
		})
	}
}
