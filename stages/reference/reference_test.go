package reference

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
	a, b := row(1, 5, "q", 4), row(1, 5, "q", 4)
	if a.UID != b.UID || len(a.Tokens) != 4 || a.Tokens[0] != b.Tokens[0] {
		t.Errorf("row(1,5) = %+v and %+v, want equal", a, b)
	}
	if c := row(2, 5, "q", 4); c.UID == a.UID {
		t.Errorf("seeds 1 and 2 give the same uid %s", a.UID)
	}
}
