package format

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// The conformance suite runs the same contract over every shard kind (STYLE.md 15):
// rows survive a write/read round trip, identical input gives identical bytes, and
// every kind of bad input is an error that names the file and, where there is one,
// the column — never a panic, never leaked Arrow memory.

func f32(v float32) *float32 { return &v }
func i32(v int32) *int32     { return &v }

func samplePrompts() []Prompt {
	return []Prompt{
		{UID: "p0", DataSource: "nq", Split: "train", SourceIndex: []int64{0}, Question: "who wrote hamlet",
			Golds: [][]string{{"William Shakespeare", "Shakespeare"}}, System: "You are a helpful assistant.",
			User: "Answer the given question. Question: who wrote hamlet\n"},
		{UID: "p1", DataSource: "hotpotqa", Split: "train", SourceIndex: []int64{3, 4},
			Question: "capital of france; größte stadt der schweiz", Golds: [][]string{{"Paris"}, {"Zürich", "Zurich"}}},
		{UID: "p2", DataSource: "nq", Split: "test"},
		{UID: "p3", DataSource: "nq", Split: "test", SourceIndex: []int64{7}, Question: "empty alias list", Golds: [][]string{nil, {"x"}}},
		{UID: "p4", DataSource: "synthetic", Split: "test", SourceIndex: []int64{1 << 40}, Question: "q", Golds: [][]string{{""}}},
	}
}

func sampleRollouts() []Rollout {
	return []Rollout{
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

func sampleScores() []Score {
	return []Score{
		{UID: "p0", Sample: 0, Answer: "Paris", EM: []float32{1}, F1: []float32{1}, FormatOK: true, Reward: 1, TT: 1234, PT: 300, Turns: 2},
		{UID: "p0", Sample: 1, EM: []float32{0}, F1: []float32{0.25}, Reward: 0, TT: 5, PT: 5, Turns: 1},
		{UID: "p1", Sample: 0, Answer: "a; b", EM: []float32{1, 0}, F1: []float32{1, 0.5}, FormatOK: true, Reward: 0.5, TT: 1 << 40, PT: 2048, Turns: 16},
		{UID: "p2", Sample: 0},
	}
}

func sampleLogprobs() []Logprob {
	return []Logprob{
		{UID: "p0", Sample: 0, Turn: 0, OldLogprobs: []float32{-0.5, -1}, RefLogprobs: []float32{-0.6, -0.9}, PMem: f32(0.75), PFull: f32(0.5), PCtx: f32(0.625),
			MemGolds: i32(1), Objectives: 2},
		{UID: "p0", Sample: 0, Turn: 1, OldLogprobs: []float32{-2}, RefLogprobs: []float32{-2.5}},
		{UID: "p0", Sample: 1, Turn: 0, PMem: f32(0), PFull: nil, PCtx: f32(0.125), MemGolds: i32(0), Objectives: 2},
		{UID: "p1", Sample: 2, Turn: 3, OldLogprobs: []float32{0}, RefLogprobs: []float32{0}, PMem: nil, PFull: f32(1)},
	}
}

func sampleAdvantages() []Advantage {
	return []Advantage{
		{UID: "p0", Sample: 0, Turn: 0, Reward: 1, AdvOutcome: 0.7071, MemReward: f32(0.25), AdvMemory: f32(1.5), Advantages: []float32{2.2, 2.2, 0.7071}},
		{UID: "p0", Sample: 0, Turn: 1, Reward: 1, AdvOutcome: 0.7071, Advantages: []float32{0.7071}},
		{UID: "p0", Sample: 1, Turn: 0, Reward: 0, AdvOutcome: -0.7071, MemReward: f32(-0.5), AdvMemory: f32(-1)},
	}
}

func sampleMetrics() []Metric {
	return []Metric{
		{Stage: "update", Iter: 0, Step: 0, Name: "pg_loss", Value: 0.125},
		{Stage: "update", Iter: 0, Step: 1, Name: "kl", Value: 1e-9},
		{Stage: "rollout", Iter: 2, Step: 0, Name: "tokens_per_s", Value: 12345.5},
	}
}

func TestConformance(t *testing.T) {
	t.Run("prompts", func(t *testing.T) { conform(t, samplePrompts()) })
	t.Run("rollouts", func(t *testing.T) { conform(t, sampleRollouts()) })
	t.Run("scores", func(t *testing.T) { conform(t, sampleScores()) })
	t.Run("logprobs", func(t *testing.T) { conform(t, sampleLogprobs()) })
	t.Run("advantages", func(t *testing.T) { conform(t, sampleAdvantages()) })
	t.Run("metrics", func(t *testing.T) { conform(t, sampleMetrics()) })
}

// tempDir is t.TempDir with its listing dumped when the test fails.
func tempDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
			if err == nil {
				t.Logf("left in %s: %s (%d bytes)", dir, strings.TrimPrefix(p, dir), fi.Size())
			}
			return nil
		})
	})
	return dir
}

func checked(t *testing.T) *memory.CheckedAllocator {
	t.Helper()
	mem := memory.NewCheckedAllocator(memory.DefaultAllocator)
	t.Cleanup(func() { mem.AssertSize(t, 0) })
	return mem
}

// writeFile writes rows to path and returns the writer's Output.
func writeFile[R Row](t *testing.T, path string, rows []R, opts ...Option) Output {
	t.Helper()
	w, err := Create[R](path, opts...)
	if err != nil {
		t.Fatalf("Create(%s) error: %v", path, err)
	}
	if err := w.Write(rows...); err != nil {
		t.Fatalf("Write error: %v", err)
	}
	n, err := w.Close()
	if err != nil {
		t.Fatalf("Close() error: %v", err)
	}
	if n != int64(len(rows)) {
		t.Fatalf("Close() = %d rows, want %d", n, len(rows))
	}
	return w.Output()
}

// writeDataset splits rows over shards files and commits dir with a manifest.
func writeDataset[R Row](t *testing.T, dir string, rows []R, shards int, opts ...Option) *Dataset {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	l := layoutFor[R]()
	m := &Manifest{Kind: l.kind, SchemaVersion: l.version, Stage: "test"}
	per := (len(rows) + shards - 1) / max(shards, 1)
	for i := range shards {
		lo, hi := min(i*per, len(rows)), min((i+1)*per, len(rows))
		m.Outputs = append(m.Outputs, writeFile(t, filepath.Join(dir, ShardName(i)), rows[lo:hi], opts...))
	}
	if err := WriteManifest(dir, m); err != nil {
		t.Fatal(err)
	}
	d, err := OpenDataset(dir)
	if err != nil {
		t.Fatalf("OpenDataset(%s) error: %v", dir, err)
	}
	return d
}

func readFile[R Row](path string, opts ...Option) ([]R, error) {
	r, err := OpenFile[R](path, opts...)
	if err != nil {
		return nil, err
	}
	return ReadAll(r)
}

func conform[R Row](t *testing.T, want []R) {
	l := layoutFor[R]()
	// EquateEmpty: empty lists read back as nil slices (documented on Row).
	diffOpts := cmp.Options{cmpopts.EquateEmpty()}

	t.Run("round trip", func(t *testing.T) {
		for _, groupRows := range []int{1, 2, 1000} {
			t.Run(strconv.Itoa(groupRows), func(t *testing.T) {
				mem := checked(t)
				path := filepath.Join(tempDir(t), "part-00000.parquet")
				out := writeFile(t, path, want, WithRowGroupRows(groupRows), WithAllocator(mem))
				got, err := readFile[R](path, WithAllocator(mem))
				if err != nil {
					t.Fatalf("read error: %v", err)
				}
				if diff := cmp.Diff(want, got, diffOpts); diff != "" {
					t.Errorf("rows (-want +got):\n%s", diff)
				}
				sum, size, err := Checksum(path)
				if err != nil {
					t.Fatal(err)
				}
				if out.SHA256 != sum || out.Bytes != size || out.Rows != int64(len(want)) || out.File != "part-00000.parquet" {
					t.Errorf("Output() = %+v, want sha256 %s, %d bytes, %d rows", out, sum, size, len(want))
				}
			})
		}
	})

	t.Run("metadata", func(t *testing.T) {
		path := filepath.Join(tempDir(t), "x.parquet")
		writeFile(t, path, want, WithRowGroupRows(2), WithOptional(OptionalColumns[R]()...))
		s, err := openSource(source{path: path}, options{mem: memory.DefaultAllocator})
		if err != nil {
			t.Fatal(err)
		}
		defer s.close()
		if s.kind != l.kind || s.version != l.version {
			t.Errorf("metadata kind, version = %q, %d, want %q, %d", s.kind, s.version, l.kind, l.version)
		}
		if got, want := s.numRowGroups(), (len(want)+1)/2; got != want {
			t.Errorf("row groups = %d, want %d", got, want)
		}
		rg := s.pf.MetaData().RowGroup(0)
		for i := range rg.NumColumns() {
			cc, err := rg.ColumnChunk(i)
			if err != nil {
				t.Fatal(err)
			}
			if cc.Compression() != compress.Codecs.Zstd {
				t.Errorf("column %s compression = %v, want zstd", cc.PathInSchema(), cc.Compression())
			}
		}
		// pqarrow adds PARQUET:field_id metadata and names list elements "element";
		// names, types and nullability are the contract.
		if s.schema.NumFields() != l.schema.NumFields() {
			t.Fatalf("stored schema has %d fields, want %d", s.schema.NumFields(), l.schema.NumFields())
		}
		for i, f := range l.schema.Fields() {
			g := s.schema.Field(i)
			if g.Name != f.Name || !arrow.TypeEqual(g.Type, f.Type) || g.Nullable != f.Nullable {
				t.Errorf("stored field %d = %s %s nullable=%v, want %s %s nullable=%v", i, g.Name, g.Type, g.Nullable, f.Name, f.Type, f.Nullable)
			}
		}
	})

	t.Run("dataset", func(t *testing.T) {
		mem := checked(t)
		d := writeDataset(t, filepath.Join(tempDir(t), "ds"), want, 2, WithRowGroupRows(2))
		if err := d.Verify(); err != nil {
			t.Fatalf("Verify() = %v, want nil", err)
		}
		r, err := OpenShards[R](d, WithAllocator(mem))
		if err != nil {
			t.Fatal(err)
		}
		got, err := ReadAll(r)
		if err != nil {
			t.Fatalf("read error: %v", err)
		}
		if diff := cmp.Diff(want, got, diffOpts); diff != "" {
			t.Errorf("rows (-want +got):\n%s", diff)
		}
		r, err = OpenShard[R](d, 1, WithAllocator(mem))
		if err != nil {
			t.Fatal(err)
		}
		got, err = ReadAll(r)
		if err != nil {
			t.Fatalf("read shard 1 error: %v", err)
		}
		if diff := cmp.Diff(want[(len(want)+1)/2:], got, diffOpts); diff != "" {
			t.Errorf("shard 1 rows (-want +got):\n%s", diff)
		}
	})

	t.Run("deterministic", func(t *testing.T) {
		dir := tempDir(t)
		a := writeFile(t, filepath.Join(dir, "a.parquet"), want)
		b := writeFile(t, filepath.Join(dir, "b.parquet"), want)
		ab, _ := os.ReadFile(filepath.Join(dir, "a.parquet"))
		bb, _ := os.ReadFile(filepath.Join(dir, "b.parquet"))
		if !bytes.Equal(ab, bb) || a.SHA256 != b.SHA256 {
			t.Errorf("two writes of the same rows differ: sha256 %s vs %s", a.SHA256, b.SHA256)
		}
	})

	t.Run("truncated", func(t *testing.T) {
		mem := checked(t)
		dir := tempDir(t)
		full := filepath.Join(dir, "full.parquet")
		writeFile(t, full, want)
		b, _ := os.ReadFile(full)
		for _, n := range []int{0, 4, 12, len(b) / 2, len(b) - 9, len(b) - 1} {
			path := filepath.Join(dir, "cut-"+strconv.Itoa(n)+".parquet")
			if err := os.WriteFile(path, b[:n], 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := readFile[R](path, WithAllocator(mem))
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), path) {
				t.Errorf("read %d of %d bytes: error %v, want ErrCorrupt naming %s", n, len(b), err, path)
			}
		}
	})

	t.Run("unlisted shard", func(t *testing.T) {
		// A manifest that lost its last entry: the shard is still there, and every
		// reader and Verify refuse the dataset naming it rather than skip its rows.
		dir := filepath.Join(tempDir(t), "ds")
		d := writeDataset(t, dir, want, 2)
		lost := d.Path(1)
		m := *d.Manifest
		m.Outputs = m.Outputs[:1]
		if err := WriteManifest(dir, &m); err != nil {
			t.Fatal(err)
		}
		if _, err := OpenDataset(dir); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), filepath.Base(lost)) {
			t.Errorf("OpenDataset = %v, want ErrCorrupt naming %s", err, filepath.Base(lost))
		}
		if _, err := ReadDataset[R](dir); !errors.Is(err, ErrCorrupt) {
			t.Errorf("ReadDataset = %v, want ErrCorrupt", err)
		}
	})

	t.Run("flipped byte", func(t *testing.T) {
		mem := checked(t)
		d := writeDataset(t, filepath.Join(tempDir(t), "ds"), want, 2)
		bad := d.Path(1)
		b, _ := os.ReadFile(bad)
		b[len(b)/2] ^= 0x40
		if err := os.WriteFile(bad, b, 0o644); err != nil {
			t.Fatal(err)
		}
		err := d.Verify()
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), bad) || strings.Contains(err.Error(), d.Path(0)) {
			t.Errorf("Verify() = %v, want ErrCorrupt naming only %s", err, bad)
		}
		r, err := OpenShards[R](d, WithAllocator(mem))
		if err == nil {
			_, err = ReadAll(r)
		}
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), bad) {
			t.Errorf("read error %v, want ErrCorrupt naming %s", err, bad)
		}
	})

	t.Run("wrong kind", func(t *testing.T) {
		dir := tempDir(t)
		path := filepath.Join(dir, "x.parquet")
		writeFile(t, path, want)
		for _, k := range kinds() {
			if k == l.kind {
				continue
			}
			err := openAs(k, path)
			if !errors.Is(err, ErrSchemaMismatch) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), `kind "`+string(l.kind)+`"`) {
				t.Errorf("open %s shard as %s: error %v, want ErrSchemaMismatch naming the file and kind", l.kind, k, err)
			}
		}
		d := writeDataset(t, filepath.Join(dir, "ds"), want, 1)
		for _, k := range kinds() {
			if k != l.kind {
				if err := openDatasetAs(k, d); !errors.Is(err, ErrSchemaMismatch) {
					t.Errorf("open %s dataset as %s: error %v, want ErrSchemaMismatch", l.kind, k, err)
				}
			}
		}
	})

	t.Run("wrong version", func(t *testing.T) {
		path := filepath.Join(tempDir(t), "x.parquet")
		writeVariant(t, path, want, "", strconv.Itoa(l.version+1))
		_, err := readFile[R](path)
		if !errors.Is(err, ErrSchemaMismatch) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "schema version") {
			t.Errorf("read error %v, want ErrSchemaMismatch naming the file and schema version", err)
		}
	})

	t.Run("missing column", func(t *testing.T) {
		dir := tempDir(t)
		for _, c := range l.cols {
			path := filepath.Join(dir, c.name+".parquet")
			writeVariant(t, path, want, c.name, "")
			got, err := readFile[R](path)
			if c.optional {
				// A shard written before the column existed: it reads, the field zero.
				if err != nil {
					t.Errorf("read without optional %q: %v", c.name, err)
					continue
				}
				for i := range got {
					if p := unsafe.Add(unsafe.Pointer(&got[i]), c.offset); !c.zero(p) {
						t.Errorf("read without optional %q: row %d holds a value", c.name, i)
					}
				}
				continue
			}
			wantMsg := path + `: column "` + c.name + `": missing`
			if !errors.Is(err, ErrSchemaMismatch) || !strings.Contains(err.Error(), wantMsg) {
				t.Errorf("read without %q: error %v, want ErrSchemaMismatch containing %q", c.name, err, wantMsg)
			}
		}
	})
}

// openAs opens path as a shard of kind k and reads it.
func openAs(k Kind, path string) error {
	var err error
	switch k {
	case KindPrompts:
		_, err = readFile[Prompt](path)
	case KindRollouts:
		_, err = readFile[Rollout](path)
	case KindScores:
		_, err = readFile[Score](path)
	case KindLogprobs:
		_, err = readFile[Logprob](path)
	case KindAdvantages:
		_, err = readFile[Advantage](path)
	case KindMetrics:
		_, err = readFile[Metric](path)
	}
	return err
}

func openDatasetAs(k Kind, d *Dataset) error {
	var err error
	switch k {
	case KindPrompts:
		_, err = OpenShards[Prompt](d)
	case KindRollouts:
		_, err = OpenShards[Rollout](d)
	case KindScores:
		_, err = OpenShards[Score](d)
	case KindLogprobs:
		_, err = OpenShards[Logprob](d)
	case KindAdvantages:
		_, err = OpenShards[Advantage](d)
	case KindMetrics:
		_, err = OpenShards[Metric](d)
	}
	return err
}

// writeVariant writes rows like a Writer would, but without column drop (when set)
// and with mempo.schema_version = version (when set): the shards an older or newer
// mempo, or another tool, might leave.
func writeVariant[R Row](t *testing.T, path string, rows []R, drop, version string) {
	t.Helper()
	l := layoutFor[R]()
	var fields []arrow.Field
	var cols []column
	for i, c := range l.cols {
		if c.name != drop {
			fields = append(fields, l.schema.Field(i))
			cols = append(cols, c)
		}
	}
	md := l.schema.Metadata()
	if version != "" {
		md = arrow.NewMetadata([]string{MetaKind, MetaSchemaVersion}, []string{string(l.kind), version})
	}
	sc := arrow.NewSchema(fields, &md)
	rb := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	defer rb.Release()
	for i := range rows {
		for j, c := range cols {
			c.enc(rb.Field(j))(unsafe.Add(unsafe.Pointer(&rows[i]), c.offset))
		}
	}
	rec := rb.NewRecordBatch()
	defer rec.Release()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
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
}

// kinds lists every shard kind this package knows, in pipeline order.
func kinds() []Kind {
	return []Kind{KindPrompts, KindRollouts, KindScores, KindLogprobs, KindAdvantages, KindMetrics}
}
