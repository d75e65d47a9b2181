package jobstest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/mempo/mempo/format"
	"github.com/mempo/mempo/jobs"
)

func TestInputFile(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "q.jsonl")
	os.WriteFile(in, []byte(`{"question":"a"}`+"\n"+`{"question":"b"}`+"\n"+`{"question":"c"}`+"\n"), 0o644)
	cfg := Config{Shards: 2, Width: 2, Batch: 1, Input: in}
	out := filepath.Join(dir, "out")
	run := func() *jobs.Result {
		t.Helper()
		res, err := Run(context.Background(), cfg, jobs.Spec{Out: out, Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	first := run()
	if first.Manifest.Rows() != 3 || len(first.Manifest.Inputs) != 1 || !strings.HasPrefix(first.Manifest.Inputs[0].Digest, "sha256:") {
		t.Fatalf("manifest rows %d inputs %v, want 3 rows and the input's digest", first.Manifest.Rows(), first.Manifest.Inputs)
	}
	if !run().Hit {
		t.Errorf("same input: not a cache hit")
	}
	os.WriteFile(in, []byte(`{"question":"a"}`+"\n"+`{"question":"B"}`+"\n"+`{"question":"c"}`+"\n"), 0o644)
	if res := run(); res.Hit || res.Manifest.Digest() == first.Manifest.Digest() {
		t.Errorf("changed input: Hit %v, digest unchanged %v; want a recomputed, different output", res.Hit, res.Manifest.Digest() == first.Manifest.Digest())
	}
}

func TestBadInput(t *testing.T) {
	in := filepath.Join(t.TempDir(), "q.jsonl")
	os.WriteFile(in, []byte(`{"question":"a"}`+"\n"+`{"q":"b"}`+"\n"), 0o644)
	_, err := Run(context.Background(), Config{Shards: 1, Batch: 1, Input: in}, jobs.Spec{Out: filepath.Join(t.TempDir(), "out")})
	if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), in+": line 2") {
		t.Errorf("Run = %v, want ErrConfig naming %s line 2", err, in)
	}
}

func TestRowsDependOnIndexOnly(t *testing.T) {
	a, b := row(1, 5, "q"), row(1, 5, "q")
	if diff := cmp.Diff(a, b); diff != "" {
		t.Errorf("row(1, 5) twice (-want +got):\n%s", diff)
	}
	if c := row(2, 5, "q"); c.UID == a.UID {
		t.Errorf("seeds 1 and 2 give the same uid %s", a.UID)
	}
	if c := row(1, 6, "q"); c.UID == a.UID {
		t.Errorf("rows 5 and 6 give the same uid %s", a.UID)
	}
}

// TestParquetPrompts reads the output back as a prompts dataset: every row once, in
// plan order, labeled as the probe stage's.
func TestParquetPrompts(t *testing.T) {
	cfg := Config{Rows: 7, Shards: 3, Width: 2, Batch: 2}
	out := filepath.Join(t.TempDir(), "out")
	res, err := Run(context.Background(), cfg, jobs.Spec{Out: out, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	if res.Manifest.Kind != format.KindPrompts || res.Manifest.SchemaVersion != format.PromptsVersion {
		t.Errorf("manifest kind %s@%d, want %s@%d", res.Manifest.Kind, res.Manifest.SchemaVersion, format.KindPrompts, format.PromptsVersion)
	}
	// Width is reported, not written: 7 rows of 2 tokens.
	if got, want := res.Manifest.Metrics["tokens"], 14.0; got != want {
		t.Errorf("manifest metrics tokens = %v, want %v", got, want)
	}
	got := readPrompts(t, out)
	var want []format.Prompt
	for i := range 7 {
		want = append(want, row(3, i, fmt.Sprintf("question %d", i)))
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("rows read back (-want +got):\n%s", diff)
	}
	var perShard []int64
	for _, o := range res.Manifest.Outputs {
		perShard = append(perShard, o.Rows)
	}
	if diff := cmp.Diff([]int64{2, 2, 3}, perShard); diff != "" {
		t.Errorf("rows per shard (-want +got):\n%s", diff)
	}
}

func readPrompts(t *testing.T, dir string) []format.Prompt {
	t.Helper()
	rows, err := format.ReadDataset[format.Prompt](dir)
	if err != nil {
		t.Fatalf("read %s: %v", dir, err)
	}
	return rows
}

// TestInputPathNotKeyed: the key depends on the input's bytes, not on how its path is
// written. The same file named by an absolute path, then a relative one, then a moved
// copy is one input: the second and third runs are cache hits.
func TestInputPathNotKeyed(t *testing.T) {
	dir := t.TempDir()
	abs := filepath.Join(dir, "in", "q.jsonl")
	os.MkdirAll(filepath.Dir(abs), 0o755)
	data := []byte(`{"question":"a"}` + "\n" + `{"question":"b"}` + "\n")
	if err := os.WriteFile(abs, data, 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	run := func(input string) *jobs.Result {
		t.Helper()
		res, err := Run(context.Background(), Config{Shards: 1, Batch: 1, Input: input}, jobs.Spec{Out: out, Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	if first := run(abs); first.Hit {
		t.Fatalf("first run is a cache hit")
	}
	t.Chdir(dir)
	if res := run(filepath.Join("in", ".", "q.jsonl")); !res.Hit {
		t.Errorf("relative path in/./q.jsonl: Hit = false, want a cache hit")
	}
	moved := filepath.Join(dir, "elsewhere", "copy.jsonl")
	os.MkdirAll(filepath.Dir(moved), 0o755)
	if err := os.Rename(abs, moved); err != nil {
		t.Fatal(err)
	}
	res := run(moved)
	if !res.Hit {
		t.Errorf("moved copy %s: Hit = false, want a cache hit", moved)
	}
	if got := res.Manifest.Inputs; len(got) != 1 || got[0].Path != abs {
		t.Errorf("manifest inputs = %v, want the path of the run that computed it, %s, for people to read", got, abs)
	}
}
