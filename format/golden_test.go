package format

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

var update = flag.Bool("update", false, "rewrite the golden shards in testdata/")

// The golden shards pin the on-disk format: a writer change that alters bytes must be
// deliberate (go test -update, and a schema version bump if columns changed), and the
// committed files are what testdata/check_pyarrow.py opens with another Arrow
// implementation.
func TestGolden(t *testing.T) {
	t.Run("prompts", func(t *testing.T) { golden(t, samplePrompts()) })
	t.Run("rollouts", func(t *testing.T) { golden(t, sampleRollouts()) })
	t.Run("scores", func(t *testing.T) { golden(t, sampleScores()) })
	t.Run("logprobs", func(t *testing.T) { golden(t, sampleLogprobs()) })
	t.Run("advantages", func(t *testing.T) { golden(t, sampleAdvantages()) })
	t.Run("metrics", func(t *testing.T) { golden(t, sampleMetrics()) })
}

func golden[R Row](t *testing.T, rows []R) {
	l := layoutFor[R]()
	want := filepath.Join("testdata", string(l.kind)+".parquet")
	var buf bytes.Buffer
	w, err := NewWriter[R](&buf, WithRowGroupRows(2))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(rows...); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile(want, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(want)
	if err != nil {
		t.Fatalf("golden shard: %v (run go test ./format -update to create it)", err)
	}
	if !bytes.Equal(buf.Bytes(), b) {
		t.Errorf("writing the %s sample rows gives %d bytes that differ from %s (%d bytes); if intended, run go test ./format -update", l.kind, buf.Len(), want, len(b))
	}
	got, err := readFile[R](want)
	if err != nil {
		t.Fatalf("read %s: %v", want, err)
	}
	if diff := cmp.Diff(rows, got, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("%s rows (-want +got):\n%s", want, diff)
	}
}
