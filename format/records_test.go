package format

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
)

// TestRecords reads every row group of each shard as an Arrow record, in order, with the
// shard's schema, and refuses a shard whose bytes the manifest does not describe.
func TestRecords(t *testing.T) {
	dir := filepath.Join(tempDir(t), "ds")
	d := writeDataset(t, dir, sampleRollouts(), 2, WithRowGroupRows(2))
	var uids []string
	for i := range d.Len() {
		sc, err := d.Records(i, func(rec arrow.RecordBatch) error {
			if rec.Schema().Field(0).Name != "uid" {
				t.Errorf("shard %d: record schema %v", i, rec.Schema())
			}
			for r := range int(rec.NumRows()) {
				uids = append(uids, rec.Column(0).ValueStr(r))
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if want, _, _ := Schema(KindRollouts); sc.NumFields() != want.NumFields() || sc.Field(0).Name != want.Field(0).Name {
			t.Errorf("shard %d: schema %v", i, sc)
		}
	}
	if got := strings.Join(uids, ","); got != "p0,p0,p0,p1,p2" {
		t.Errorf("uids over the records = %s, want the rows in order", got)
	}
	b, err := os.ReadFile(d.Path(0))
	if err != nil {
		t.Fatal(err)
	}
	b[10] ^= 1
	if err := os.WriteFile(d.Path(0), b, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Records(0, func(arrow.RecordBatch) error { return nil }); !errors.Is(err, ErrCorrupt) {
		t.Errorf("Records(corrupt shard) = %v, want ErrCorrupt", err)
	}
}

func TestDatasetString(t *testing.T) {
	d := writeDataset(t, filepath.Join(tempDir(t), "ds"), sampleMetrics(), 2)
	want := "metrics v1, 2 shards, 3 rows, digest " + d.Manifest.Digest()
	if got := d.String(); got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}
