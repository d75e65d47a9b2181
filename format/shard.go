package format

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
)

// ErrSchemaMismatch marks a shard whose kind, schema version or columns are not the
// ones the reader expects.
var ErrSchemaMismatch = errors.New("schema mismatch")

// shard is one opened Parquet file of a known kind, read row group by row group.
// Everything in it is untrusted input: footer parsing and decoding run under recover,
// so a corrupt file is an error that names it, never a panic.
type shard struct {
	path    string
	pf      *file.Reader
	fr      *pqarrow.FileReader
	kind    Kind
	version int
	schema  *arrow.Schema
}

// source names a shard to open and, for dataset shards, the manifest entry that its
// bytes must match.
type source struct {
	path string
	want *Output
}

// openSource opens src. With a manifest entry the size is always checked, and with
// verify the sha256 too: the file is read once into memory, hashed and decoded from
// those same bytes, so what is decoded is what was verified.
func openSource(src source, o options) (*shard, error) {
	var r parquet.ReaderAtSeeker
	switch {
	case src.want != nil && o.verify:
		b, err := os.ReadFile(src.path)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", src.path, err)
		}
		if err := checkBytes(src.path, b, *src.want); err != nil {
			return nil, err
		}
		r = bytes.NewReader(b)
	default:
		f, err := os.Open(src.path)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", src.path, err)
		}
		if src.want != nil {
			st, err := f.Stat()
			if err == nil && st.Size() != src.want.Bytes {
				err = fmt.Errorf("read %s: %d bytes, manifest says %d: %w", src.path, st.Size(), src.want.Bytes, ErrCorrupt)
			}
			if err != nil {
				f.Close()
				return nil, err
			}
		}
		r = f
	}
	s, err := openParquet(src.path, r, o.mem)
	if err != nil {
		if c, ok := r.(io.Closer); ok {
			c.Close()
		}
		return nil, err
	}
	return s, nil
}

// checkBytes compares a shard's bytes with its manifest entry.
func checkBytes(path string, b []byte, want Output) error {
	if int64(len(b)) != want.Bytes {
		return fmt.Errorf("read %s: %d bytes, manifest says %d: %w", path, len(b), want.Bytes, ErrCorrupt)
	}
	sum := sha256.Sum256(b)
	if got := hex.EncodeToString(sum[:]); got != want.SHA256 {
		return fmt.Errorf("read %s: sha256 %.12s…, manifest says %.12s…: %w", path, got, want.SHA256, ErrCorrupt)
	}
	return nil
}

func openParquet(path string, r parquet.ReaderAtSeeker, mem memory.Allocator) (s *shard, err error) {
	defer func() {
		if p := recover(); p != nil {
			s, err = nil, fmt.Errorf("read %s: truncated or not Parquet (%v): %w", path, p, ErrCorrupt)
		}
	}()
	// The page buffer pool stays on the Go allocator: it is recycled by finalizers, not
	// by Release, and would make a checked allocator's count meaningless.
	pf, err := file.NewParquetReader(r)
	if err != nil {
		return nil, fmt.Errorf("read %s: truncated or not Parquet (%w): %w", path, err, ErrCorrupt)
	}
	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{}, mem)
	if err != nil {
		pf.Close()
		return nil, fmt.Errorf("read %s: schema: %w: %w", path, err, ErrCorrupt)
	}
	sc, err := fr.Schema()
	if err != nil {
		pf.Close()
		return nil, fmt.Errorf("read %s: schema: %w: %w", path, err, ErrCorrupt)
	}
	// pqarrow decodes column chunk metadata in goroutines, where a panic on a damaged
	// footer (a chunk without its metadata) cannot be recovered: decode each chunk's
	// metadata here first, under this function's recover.
	md := pf.MetaData()
	for g := range md.NumRowGroups() {
		rg := md.RowGroup(g)
		for c := range rg.NumColumns() {
			if _, err := rg.ColumnChunk(c); err != nil {
				pf.Close()
				return nil, fmt.Errorf("read %s: row group %d column %d: %w: %w", path, g, c, err, ErrCorrupt)
			}
		}
	}
	s = &shard{path: path, pf: pf, fr: fr, schema: sc}
	kv := md.KeyValueMetadata()
	if v := kv.FindValue(MetaKind); v != nil {
		s.kind = Kind(*v)
	}
	if v := kv.FindValue(MetaSchemaVersion); v != nil {
		s.version, _ = strconv.Atoi(*v) // an unparsable version is 0 and fails the check
	}
	return s, nil
}

func (s *shard) close() error { return s.pf.Close() }

func (s *shard) numRowGroups() int { return s.pf.NumRowGroups() }

func (s *shard) numRows() int64 { return s.pf.NumRows() }

// check verifies the shard holds kind l.kind at l.version with every column of l, and
// returns the leaf column indices to read and each layout column's index in the
// projected record.
func (s *shard) check(l *layout) (leaves []int, cols []int, err error) {
	switch {
	case s.kind == "":
		return nil, nil, fmt.Errorf("read %s: no %s metadata: not a mempo shard, want kind %q: %w", s.path, MetaKind, l.kind, ErrSchemaMismatch)
	case s.kind != l.kind:
		return nil, nil, fmt.Errorf("read %s: kind %q, want %q: %w", s.path, s.kind, l.kind, ErrSchemaMismatch)
	case s.version != l.version:
		return nil, nil, fmt.Errorf("read %s: kind %s schema version %d, want %d (rewrite it with this mempo version): %w",
			s.path, s.kind, s.version, l.version, ErrSchemaMismatch)
	}
	fields := s.fr.Manifest.Fields
	var roots []int
	for _, c := range l.cols {
		idx := s.schema.FieldIndices(c.name)
		if len(idx) == 0 && c.optional {
			roots = append(roots, -1) // absent: the field keeps its zero value
			continue
		}
		if len(idx) == 0 {
			return nil, nil, fmt.Errorf("read %s: column %q: missing: %w", s.path, c.name, ErrSchemaMismatch)
		}
		if got := s.schema.Field(idx[0]).Type; !arrow.TypeEqual(got, c.typ) {
			return nil, nil, fmt.Errorf("read %s: column %q: type %s, want %s: %w", s.path, c.name, got, c.typ, ErrSchemaMismatch)
		}
		roots = append(roots, idx[0])
	}
	// Leaves must be listed in file order; the projected record's columns follow it.
	inRoots := map[int]bool{}
	for _, r := range roots {
		inRoots[r] = true
	}
	pos := map[int]int{}
	for i := range fields {
		if inRoots[i] {
			pos[i] = len(pos)
			leaves = appendLeaves(leaves, &fields[i])
		}
	}
	for _, r := range roots {
		if r < 0 {
			cols = append(cols, -1)
			continue
		}
		cols = append(cols, pos[r])
	}
	return leaves, cols, nil
}

func appendLeaves(dst []int, f *pqarrow.SchemaField) []int {
	// Group fields (lists) do not set ColIndex to -1, so IsLeaf cannot tell them apart.
	if len(f.Children) == 0 {
		return append(dst, f.ColIndex)
	}
	for i := range f.Children {
		dst = appendLeaves(dst, &f.Children[i])
	}
	return dst
}

// rowGroup reads row group i as one record (of the given leaves; nil reads all).
// The caller releases it.
func (s *shard) rowGroup(i int, leaves []int) (rec arrow.RecordBatch, err error) {
	defer func() {
		if p := recover(); p != nil {
			rec, err = nil, fmt.Errorf("read %s: row group %d: %v: %w", s.path, i, p, ErrCorrupt)
		}
	}()
	s.fr.Props.BatchSize = s.pf.MetaData().RowGroup(i).NumRows()
	rr, err := s.fr.GetRecordReader(context.Background(), leaves, []int{i})
	if err != nil {
		return nil, fmt.Errorf("read %s: row group %d: %w: %w", s.path, i, err, ErrCorrupt)
	}
	defer rr.Release()
	if !rr.Next() {
		if err := rr.Err(); err != nil && !errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("read %s: row group %d: %w: %w", s.path, i, err, ErrCorrupt)
		}
		return nil, fmt.Errorf("read %s: row group %d: no rows: %w", s.path, i, ErrCorrupt)
	}
	rec = rr.RecordBatch()
	rec.Retain()
	if err := rr.Err(); err != nil && !errors.Is(err, io.EOF) {
		rec.Release()
		return nil, fmt.Errorf("read %s: row group %d: %w: %w", s.path, i, err, ErrCorrupt)
	}
	return rec, nil
}
