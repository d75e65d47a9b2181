package format

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/google/go-cmp/cmp"
)

func TestOpenDatasetNeedsManifest(t *testing.T) {
	tests := []struct {
		name     string
		manifest string // "" writes none
	}{
		{"no manifest", ""},
		{"not json", "{"},
		{"no kind", `{"schema_version": 1, "outputs": []}`},
		{"bad shard name", `{"kind": "prompts", "schema_version": 1, "outputs": [{"file": "../x.parquet", "sha256": "` + strings.Repeat("0", 64) + `", "bytes": 1, "rows": 1}]}`},
		{"bad sha256", `{"kind": "prompts", "schema_version": 1, "outputs": [{"file": "part-00000.parquet", "sha256": "abc", "bytes": 1, "rows": 1}]}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := tempDir(t)
			// A complete-looking shard is there, but without a valid manifest it
			// must not be read.
			writeFile(t, filepath.Join(dir, ShardName(0)), samplePrompts())
			if tt.manifest != "" {
				if err := os.WriteFile(filepath.Join(dir, ManifestName), []byte(tt.manifest), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			d, err := OpenDataset(dir)
			if !errors.Is(err, ErrNotDataset) || !strings.Contains(err.Error(), dir) {
				t.Errorf("OpenDataset(%s) = %v, %v, want ErrNotDataset naming the dir", dir, d, err)
			}
		})
	}
}

func TestVerifyMissingShard(t *testing.T) {
	d := writeDataset(t, filepath.Join(tempDir(t), "ds"), sampleScores(), 2)
	if err := os.Remove(d.Path(0)); err != nil {
		t.Fatal(err)
	}
	err := d.Verify()
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), d.Path(0)) || !strings.Contains(err.Error(), "missing") {
		t.Errorf("Verify() = %v, want ErrCorrupt naming the missing %s", err, d.Path(0))
	}
	if _, err := OpenShards[Score](d); err == nil || !strings.Contains(err.Error(), d.Path(0)) {
		t.Errorf("OpenShards error = %v, want one naming %s", err, d.Path(0))
	}
}

func TestVerifyOff(t *testing.T) {
	// Without checksum verification a same-size edit goes unnoticed by design, but a
	// size change is still caught from the manifest.
	d := writeDataset(t, filepath.Join(tempDir(t), "ds"), sampleMetrics(), 1)
	b, _ := os.ReadFile(d.Path(0))
	if err := os.WriteFile(d.Path(0), append(b, 0), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := OpenShards[Metric](d, WithVerify(false))
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "bytes, manifest says") {
		t.Errorf("OpenShards(WithVerify(false)) error = %v, want a size mismatch", err)
	}
}

func TestEmpty(t *testing.T) {
	mem := checked(t)
	dir := tempDir(t)
	out := writeFile(t, filepath.Join(dir, "empty.parquet"), []Metric(nil), WithAllocator(mem))
	if out.Rows != 0 || out.Bytes == 0 {
		t.Errorf("Output() = %+v, want 0 rows in a non-empty file", out)
	}
	got, err := readFile[Metric](filepath.Join(dir, "empty.parquet"), WithAllocator(mem))
	if err != nil || len(got) != 0 {
		t.Errorf("read empty shard = %v, %v, want no rows, nil", got, err)
	}
	d := writeDataset(t, filepath.Join(dir, "ds"), []Metric(nil), 0)
	r, err := OpenShards[Metric](d)
	if err != nil {
		t.Fatal(err)
	}
	if r.Next() || r.Err() != nil {
		t.Errorf("reading a dataset of no shards: Next() = true or Err() = %v", r.Err())
	}
}

func TestOptions(t *testing.T) {
	tests := []struct {
		name string
		opt  Option
		want string
	}{
		{"zero row group", WithRowGroupRows(0), "row group rows 0"},
		{"zstd 0", WithZstdLevel(0), "zstd level 0"},
		{"zstd 23", WithZstdLevel(23), "zstd level 23"},
		{"nil allocator", WithAllocator(nil), "nil allocator"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewWriter[Metric](&bytes.Buffer{}, tt.opt)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("NewWriter error = %v, want %q", err, tt.want)
			}
		})
	}
}

func TestZstdLevelChangesBytesNotRows(t *testing.T) {
	rows := sampleRollouts()
	for range 6 {
		rows = append(rows, rows...)
	}
	dir := tempDir(t)
	fast := writeFile(t, filepath.Join(dir, "fast.parquet"), rows, WithZstdLevel(1))
	best := writeFile(t, filepath.Join(dir, "best.parquet"), rows, WithZstdLevel(19))
	if fast.SHA256 == best.SHA256 {
		t.Errorf("zstd level 1 and 19 wrote identical files; the level is not applied")
	}
	got, err := readFile[Rollout](filepath.Join(dir, "best.parquet"))
	if err != nil || len(got) != len(rows) {
		t.Errorf("read = %d rows, %v, want %d rows", len(got), err, len(rows))
	}
}

// failAfter accepts n bytes, then fails like a full disk.
type failAfter struct{ n int }

var errDiskFull = errors.New("no space left on device")

func (f *failAfter) Write(p []byte) (int, error) {
	if len(p) > f.n {
		k := f.n
		f.n = 0
		return k, errDiskFull
	}
	f.n -= len(p)
	return len(p), nil
}

func TestWriterSinkFails(t *testing.T) {
	// No checked allocator here: when the sink fails inside a column chunk, arrow's
	// own column writers unwind by panic and leave their encoder buffers to the GC.
	for _, limit := range []int{0, 10, 1000} {
		w, err := NewWriter[Rollout](&failAfter{n: limit}, WithRowGroupRows(2))
		if err != nil {
			if !errors.Is(err, errDiskFull) {
				t.Errorf("limit %d: NewWriter error = %v, want disk full", limit, err)
			}
			continue
		}
		werr := w.Write(sampleRollouts()...)
		_, cerr := w.Close()
		if !errors.Is(werr, errDiskFull) && !errors.Is(cerr, errDiskFull) {
			t.Errorf("limit %d: Write, Close errors = %v, %v, want disk full", limit, werr, cerr)
		}
		if w.Output() != (Output{}) {
			t.Errorf("limit %d: Output() = %+v after a failed write, want zero", limit, w.Output())
		}
	}
}

func TestCreate(t *testing.T) {
	dir := tempDir(t)
	path := filepath.Join(dir, ShardName(0))
	writeFile(t, path, sampleScores())
	if _, err := Create[Score](path); err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("Create over an existing shard: error = %v, want one naming %s", err, path)
	}

	aborted := filepath.Join(dir, ShardName(1))
	w, err := Create[Score](aborted)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(sampleScores()...); err != nil {
		t.Fatal(err)
	}
	w.Abort()
	if _, err := os.Stat(aborted); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("after Abort, Stat(%s) = %v, want not exist", aborted, err)
	}
	if err := w.Write(sampleScores()...); err == nil {
		t.Errorf("Write after Abort = nil, want an error")
	}
}

func TestNullInRequiredColumn(t *testing.T) {
	// Another tool may write uid as a nullable column; a null there is an error that
	// names the row and the column, not an empty uid.
	path := filepath.Join(tempDir(t), "x.parquet")
	l := layoutFor[Metric]()
	fields := append([]arrow.Field(nil), l.schema.Fields()...)
	fields[3].Nullable = true // name
	md := l.schema.Metadata()
	sc := arrow.NewSchema(fields, &md)
	rb := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	defer rb.Release()
	for i := range 3 {
		rb.Field(0).(*array.StringBuilder).Append("update")
		rb.Field(1).(*array.Int32Builder).Append(0)
		rb.Field(2).(*array.Int64Builder).Append(int64(i))
		if i == 2 {
			rb.Field(3).(*array.StringBuilder).AppendNull()
		} else {
			rb.Field(3).(*array.StringBuilder).Append("kl")
		}
		rb.Field(4).(*array.Float64Builder).Append(1)
	}
	rec := rb.NewRecordBatch()
	defer rec.Release()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	fw, err := pqarrow.NewFileWriter(sc, f, parquet.NewWriterProperties(), pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema()))
	if err != nil {
		t.Fatal(err)
	}
	if err := fw.Write(rec); err != nil {
		t.Fatal(err)
	}
	if err := fw.Close(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	_, err = readFile[Metric](path)
	want := `row 2: column "name": null`
	if !errors.Is(err, ErrSchemaMismatch) || !strings.Contains(err.Error(), want) {
		t.Errorf("read error = %v, want ErrSchemaMismatch containing %q", err, want)
	}
}

func TestReaderStreamsRowGroups(t *testing.T) {
	// The reader holds one row group: after the first Next of a 3-group file, exactly
	// one group's rows are buffered.
	rows := sampleMetrics()
	path := filepath.Join(tempDir(t), "x.parquet")
	writeFile(t, path, rows, WithRowGroupRows(1))
	r, err := OpenFile[Metric](path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var got []Metric
	for r.Next() {
		if len(r.buf) != 1 {
			t.Fatalf("buffered %d rows, want 1 (one row group)", len(r.buf))
		}
		got = append(got, r.Row())
	}
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(rows, got); diff != "" {
		t.Errorf("rows (-want +got):\n%s", diff)
	}
	if err := r.Close(); err != nil {
		t.Errorf("second Close() = %v, want nil", err)
	}
}

func TestSchema(t *testing.T) {
	for _, k := range kinds() {
		s, v, ok := Schema(k)
		if !ok || v < 1 || s.NumFields() == 0 {
			t.Errorf("Schema(%s) = %v, %d, %v, want a schema and version", k, s, v, ok)
			continue
		}
		if got, _ := s.Metadata().GetValue(MetaKind); got != string(k) {
			t.Errorf("Schema(%s) metadata kind = %q", k, got)
		}
	}
	if _, _, ok := Schema("nope"); ok {
		t.Errorf("Schema(nope) ok = true, want false")
	}
}

func TestDamagedBytesNeverPanic(t *testing.T) {
	// Without the manifest's checksum, a reader still meets damaged bytes: it must
	// return rows or an error, never panic. Flip bytes across a whole shard.
	dir := tempDir(t)
	path := filepath.Join(dir, "x.parquet")
	writeFile(t, path, sampleRollouts(), WithRowGroupRows(2))
	orig, _ := os.ReadFile(path)
	bad := filepath.Join(dir, "bad.parquet")
	step := max(1, len(orig)/400)
	for pos := 0; pos < len(orig); pos += step {
		b := bytes.Clone(orig)
		b[pos] ^= 0xff
		if err := os.WriteFile(bad, b, 0o644); err != nil {
			t.Fatal(err)
		}
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Errorf("byte %d flipped: panic %v", pos, p)
				}
			}()
			if _, err := readFile[Rollout](bad); err != nil && !strings.Contains(err.Error(), bad) {
				t.Errorf("byte %d flipped: error %v does not name %s", pos, err, bad)
			}
		}()
	}
}

func TestRolloutInvariants(t *testing.T) {
	ok := sampleRollouts()
	for _, c := range []struct {
		name string
		edit func(r *Rollout)
		want string // "" for no violation
	}{
		{"valid", func(*Rollout) {}, ""},
		{"observation without ids", func(r *Rollout) { r.ObservationIDs = nil }, "observation of 44 bytes with 0 observation_ids"},
		{"ids without observation", func(r *Rollout) { r.Observation = "" }, "observation of 0 bytes with 3 observation_ids"},
		{"memory span past the response", func(r *Rollout) { r.MemEnd = 5 }, "memory span [0, 5) outside the response's 4 tokens"},
		{"inverted memory span", func(r *Rollout) { r.MemStart = 2; r.MemEnd = 1 }, "memory span [2, 1)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := ok[0]
			r.ObservationIDs = slices.Clone(r.ObservationIDs)
			c.edit(&r)
			err := r.Check()
			if c.want == "" {
				if err != nil {
					t.Fatalf("Check() = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, ErrInvariant) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Check() = %v, want ErrInvariant containing %q", err, c.want)
			}
		})
	}
}

// A dataset whose rows break an invariant is refused by CheckRows, naming the shard, the
// row and its key; a dataset of the retired rollouts version 1 is refused on open with the
// reason and the fix.
func TestCheckRows(t *testing.T) {
	rows := sampleRollouts()
	dir := filepath.Join(tempDir(t), "ds")
	d := writeDataset(t, dir, rows, 1)
	if err := d.CheckRows(10); err != nil {
		t.Fatalf("CheckRows on valid rows = %v", err)
	}

	rows[0].ObservationIDs = nil
	bad := filepath.Join(tempDir(t), "bad")
	d = writeDataset(t, bad, rows, 1)
	err := d.CheckRows(10)
	if !errors.Is(err, ErrInvariant) || !strings.Contains(err.Error(), "part-00000.parquet: row 0 (uid p0 sample 0 turn 0)") {
		t.Fatalf("CheckRows = %v, want the shard and row named", err)
	}

	m := d.Manifest
	m.SchemaVersion = 1
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bad, ManifestName), b, 0o644); err != nil {
		t.Fatal(err)
	}
	if d, err = OpenDataset(bad); err != nil {
		t.Fatal(err)
	}
	_, err = OpenShards[Rollout](d)
	if !errors.Is(err, ErrSchemaMismatch) || !strings.Contains(err.Error(), "re-run the rollout stage") {
		t.Fatalf("OpenShards on a version-1 rollouts dataset = %v, want ErrSchemaMismatch saying to re-run the rollout stage", err)
	}
}

// ReadPrompts returns the prompts sorted by uid and refuses an empty dataset or a uid
// that appears twice.
func TestReadPrompts(t *testing.T) {
	dir := tempDir(t)
	ok := writeDataset(t, filepath.Join(dir, "ok"), []Prompt{{UID: "b"}, {UID: "a"}}, 1)
	got, err := ReadPrompts(ok.Dir)
	if err != nil || len(got) != 2 || got[0].UID != "a" || got[1].UID != "b" {
		t.Fatalf("ReadPrompts = %v, %v; want a then b", got, err)
	}
	for name, rows := range map[string][]Prompt{"empty": nil, "twice": {{UID: "a"}, {UID: "a"}}} {
		d := writeDataset(t, filepath.Join(dir, name), rows, 1)
		if _, err := ReadPrompts(d.Dir); !errors.Is(err, ErrInvariant) {
			t.Errorf("ReadPrompts(%s) = %v, want ErrInvariant", name, err)
		}
	}
}

// TestVerifyManifestClaims edits a committed manifest's claims — the shards keep their
// bytes and digests — and wants both Verify and a reader to refute them from the
// shards' footers.
func TestVerifyManifestClaims(t *testing.T) {
	tests := []struct {
		name string
		edit func(m *Manifest)
		want string
	}{
		{"rows +5", func(m *Manifest) { m.Outputs[1].Rows += 5 }, "manifest says"},
		{"kind", func(m *Manifest) { m.Kind = KindAdvantages }, `kind "scores"`},
		{"schema version", func(m *Manifest) { m.SchemaVersion++ }, "schema version"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := writeDataset(t, filepath.Join(tempDir(t), "ds"), sampleScores(), 2)
			if err := d.Verify(); err != nil {
				t.Fatalf("Verify() before the edit = %v, want nil", err)
			}
			tt.edit(d.Manifest)
			if err := WriteManifest(d.Dir, d.Manifest); err != nil {
				t.Fatal(err)
			}
			d, err := OpenDataset(d.Dir)
			if err != nil {
				t.Fatal(err)
			}
			err = d.Verify()
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrSchemaMismatch) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Verify() = %v, want ErrCorrupt or ErrSchemaMismatch mentioning %q", err, tt.want)
			}
			var rerr error
			switch d.Manifest.Kind {
			case KindScores:
				_, rerr = ReadDataset[Score](d.Dir)
			case KindAdvantages:
				_, rerr = ReadDataset[Advantage](d.Dir)
			}
			if rerr == nil {
				t.Errorf("ReadDataset(%s) = nil error, want the edited manifest refused", d.Dir)
			}
		})
	}
}
