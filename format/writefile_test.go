package format

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestWriteFile(t *testing.T) {
	dir := t.TempDir()
	rows := []Prompt{
		{UID: "a", DataSource: "nq", Split: "train", SourceIndex: []int64{0, 1}, Question: "q0; q1", Golds: [][]string{{"x"}, {"y", "z"}}},
		{UID: "b", DataSource: "nq", Split: "train", SourceIndex: []int64{2, 3}, Question: "q2; q3", Golds: [][]string{{"u"}, {"v"}}},
	}
	path := filepath.Join(dir, ShardName(0))
	out, err := WriteFile(path, rows, WithRowGroupRows(1))
	if err != nil {
		t.Fatal(err)
	}
	sum, n, err := Checksum(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := (Output{File: ShardName(0), SHA256: sum, Bytes: n, Rows: 2}); out != want {
		t.Errorf("WriteFile = %+v, want %+v", out, want)
	}
	r, err := OpenFile[Prompt](path)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(rows, got); diff != "" {
		t.Errorf("rows read back (-want +got):\n%s", diff)
	}

	// Same rows, same bytes: a stage's shard digest depends on its rows alone.
	again := filepath.Join(dir, ShardName(1))
	out2, err := WriteFile(again, rows, WithRowGroupRows(1))
	if err != nil {
		t.Fatal(err)
	}
	if out2.SHA256 != out.SHA256 {
		t.Errorf("second WriteFile sha256 %s, want %s", out2.SHA256, out.SHA256)
	}
}

func TestWriteFileErrors(t *testing.T) {
	dir := t.TempDir()
	existing := filepath.Join(dir, ShardName(0))
	os.WriteFile(existing, []byte("keep"), 0o644)
	if _, err := WriteFile(existing, []Prompt{{UID: "a"}}); err == nil {
		t.Errorf("WriteFile over an existing file = nil error, want one")
	}
	if b, _ := os.ReadFile(existing); string(b) != "keep" {
		t.Errorf("existing file now %q, want it untouched", b)
	}
	bad := filepath.Join(dir, ShardName(1))
	if _, err := WriteFile(bad, []Prompt{{UID: "a"}}, WithZstdLevel(0)); err == nil {
		t.Errorf("WriteFile with zstd level 0 = nil error, want one")
	}
	if _, err := os.Stat(bad); !os.IsNotExist(err) {
		t.Errorf("failed WriteFile left %s (stat err %v)", bad, err)
	}
}
