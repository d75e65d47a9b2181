package format

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// Dataset is a committed dataset directory: its shards are exactly the files its
// manifest lists, in that order. A directory is a dataset only once its manifest
// exists (the manifest is written last), so a Dataset never sees a half-written
// output. Shards are immutable after commit; their checksums prove it.
type Dataset struct {
	Dir      string
	Manifest *Manifest
}

// OpenDataset opens the dataset in dir. A directory without a valid manifest is not a
// dataset (ErrNotDataset), whatever Parquet files it holds; one holding a Parquet file
// its manifest does not list is corrupt (ErrCorrupt naming the file): a manifest that
// lost an entry would otherwise have every reader skip that shard's rows in silence.
func OpenDataset(dir string) (*Dataset, error) {
	m, err := ReadManifest(dir)
	if err != nil {
		return nil, err
	}
	if err := checkUnlisted(dir, m); err != nil {
		return nil, err
	}
	return &Dataset{Dir: dir, Manifest: m}, nil
}

// checkUnlisted fails on the first Parquet file directly in dir that m does not list.
func checkUnlisted(dir string, m *Manifest) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("read %s: %w", dir, err)
	}
	listed := make(map[string]bool, len(m.Outputs))
	for _, o := range m.Outputs {
		listed[o.File] = true
	}
	for _, e := range entries {
		if name := e.Name(); !e.IsDir() && filepath.Ext(name) == ".parquet" && !listed[name] {
			return fmt.Errorf("dataset %s holds %s, which its %s does not list: %w", dir, name, ManifestName, ErrCorrupt)
		}
	}
	return nil
}

// Path returns the path of shard i in manifest order.
func (d *Dataset) Path(i int) string { return filepath.Join(d.Dir, d.Manifest.Outputs[i].File) }

// Len returns the number of shards.
func (d *Dataset) Len() int { return len(d.Manifest.Outputs) }

// VerifyShard recomputes shard i's size and sha256 and compares them with the
// manifest, then the manifest's row count, kind and schema with the shard's Parquet
// footer; a mismatch or a missing file is ErrCorrupt naming the file.
func (d *Dataset) VerifyShard(i int) error {
	want := d.Manifest.Outputs[i]
	path := d.Path(i)
	sum, n, err := Checksum(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("verify %s: listed in the manifest but missing: %w", path, ErrCorrupt)
		}
		return fmt.Errorf("verify %s: %w", path, err)
	}
	if n != want.Bytes {
		return fmt.Errorf("verify %s: %d bytes, manifest says %d: %w", path, n, want.Bytes, ErrCorrupt)
	}
	if sum != want.SHA256 {
		return fmt.Errorf("verify %s: sha256 %.12s…, manifest says %.12s…: %w", path, sum, want.SHA256, ErrCorrupt)
	}
	return d.verifyClaims(i)
}

// verifyClaims checks what the manifest says about shard i beyond its bytes — its row
// count, kind, schema version and columns — against the shard's own Parquet footer,
// without decoding any data: a manifest edited after the commit keeps the shard's
// digest, so only the footer can refute it.
func (d *Dataset) verifyClaims(i int) error {
	path := d.Path(i)
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("verify %s: %w", path, err)
	}
	s, err := openParquet(path, f, memory.DefaultAllocator)
	if err != nil {
		f.Close()
		return err
	}
	defer s.close()
	m := d.Manifest
	if err := claims(s, m.Outputs[i]); err != nil {
		return err
	}
	if s.kind != m.Kind || s.version != m.SchemaVersion {
		return fmt.Errorf("verify %s: kind %q schema version %d, manifest says kind %q version %d: %w",
			path, s.kind, s.version, m.Kind, m.SchemaVersion, ErrCorrupt)
	}
	l := layoutOf(m.Kind)
	if l == nil {
		return fmt.Errorf("verify %s: kind %q is not a mempo shard kind: %w", path, m.Kind, ErrSchemaMismatch)
	}
	if l.version == m.SchemaVersion {
		if _, _, err := s.check(l); err != nil {
			return err
		}
	}
	return nil
}

// claims compares a dataset shard's row count, from its footer, with its manifest
// entry: the check every reader makes before the first row.
func claims(s *shard, want Output) error {
	if n := s.numRows(); n != want.Rows {
		return fmt.Errorf("read %s: %d rows, manifest says %d: %w", s.path, n, want.Rows, ErrCorrupt)
	}
	return nil
}

// Verify checks every shard (VerifyShard: bytes, then the manifest's rows, kind and
// schema against the shard's footer) and returns all failures joined, so one run names
// every bad file.
func (d *Dataset) Verify() error {
	var errs []error
	for i := range d.Manifest.Outputs {
		if err := d.VerifyShard(i); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Checksum returns the hex sha256 and size of the file at path, streaming it.
func Checksum(path string) (sum string, size int64, err error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, fmt.Errorf("read %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

// CheckKind fails when the dataset's manifest is of another kind or version than R, so a
// stage can refuse a stale input before it loads anything else.
func CheckKind[R Row](d *Dataset) error {
	l := layoutFor[R]()
	m := d.Manifest
	path := filepath.Join(d.Dir, ManifestName)
	if m.Kind != l.kind {
		return fmt.Errorf("read %s: kind %q, want %q: %w", path, m.Kind, l.kind, ErrSchemaMismatch)
	}
	if why, ok := retired[m.Kind][m.SchemaVersion]; ok {
		return fmt.Errorf("read %s: kind %s schema version %d, want %d: %s: %w", path, m.Kind, m.SchemaVersion, l.version, why, ErrSchemaMismatch)
	}
	if m.SchemaVersion != l.version {
		return fmt.Errorf("read %s: kind %s schema version %d, want %d (rewrite it with this mempo version): %w",
			path, m.Kind, m.SchemaVersion, l.version, ErrSchemaMismatch)
	}
	return nil
}

// OpenShards returns a reader over every shard of d in manifest order. Each shard is
// checked against the manifest (size, and sha256 unless WithVerify(false)) before its
// rows are decoded.
func OpenShards[R Row](d *Dataset, opts ...Option) (*Reader[R], error) {
	if err := CheckKind[R](d); err != nil {
		return nil, err
	}
	srcs := make([]source, d.Len())
	for i := range srcs {
		srcs[i] = source{path: d.Path(i), want: &d.Manifest.Outputs[i]}
	}
	return newReader[R](srcs, opts)
}

// OpenShard returns a reader over shard i of d alone, checked like OpenShards.
func OpenShard[R Row](d *Dataset, i int, opts ...Option) (*Reader[R], error) {
	if i < 0 || i >= d.Len() {
		return nil, fmt.Errorf("read %s: shard %d of %d: out of range", d.Dir, i, d.Len())
	}
	if err := CheckKind[R](d); err != nil {
		return nil, err
	}
	return newReader[R]([]source{{path: d.Path(i), want: &d.Manifest.Outputs[i]}}, opts)
}

// ReadDataset reads every row of the dataset in dir, each shard checked against the
// manifest. It holds the whole dataset in memory: for tools, tests and small datasets;
// stages stream shard by shard.
func ReadDataset[R Row](dir string, opts ...Option) ([]R, error) {
	d, err := OpenDataset(dir)
	if err != nil {
		return nil, err
	}
	r, err := OpenShards[R](d, opts...)
	if err != nil {
		return nil, err
	}
	return ReadAll(r)
}

// ReadPrompts reads a whole prompts dataset sorted by uid, the order every stage plans
// its work in. An empty dataset or a uid that appears twice breaks the contract that a
// uid names one question (DESIGN.md §3) and is refused with ErrInvariant.
func ReadPrompts(dir string) ([]Prompt, error) {
	rows, err := ReadDataset[Prompt](dir)
	if err != nil {
		return nil, err
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("%s: no prompts: %w", dir, ErrInvariant)
	}
	slices.SortStableFunc(rows, func(a, b Prompt) int { return cmp.Compare(a.UID, b.UID) })
	for i := 1; i < len(rows); i++ {
		if rows[i].UID == rows[i-1].UID {
			return nil, fmt.Errorf("%s: uid %s appears twice; uids must be unique: %w", dir, rows[i].UID, ErrInvariant)
		}
	}
	return rows, nil
}

// Records reads shard i's row groups as Arrow records, in order, for readers that take
// any schema (the inspect report), and returns the shard's schema, which a shard without
// rows has too: the shard is checked against its manifest entry (size and, with the
// default options, sha256) and must be of the manifest's kind and schema version. fn
// receives each record (its schema is the shard's); a record is released when fn
// returns, so fn must not keep it.
func (d *Dataset) Records(i int, fn func(rec arrow.RecordBatch) error) (*arrow.Schema, error) {
	o, _ := newOptions(nil)
	m := d.Manifest
	sh, err := openSource(source{path: d.Path(i), want: &m.Outputs[i]}, o)
	if err != nil {
		return nil, err
	}
	defer sh.close()
	if sh.kind != m.Kind || sh.version != m.SchemaVersion {
		return nil, fmt.Errorf("read %s: kind %q version %d, manifest says %q version %d: %w",
			sh.path, sh.kind, sh.version, m.Kind, m.SchemaVersion, ErrSchemaMismatch)
	}
	for g := range sh.numRowGroups() {
		if sh.pf.MetaData().RowGroup(g).NumRows() == 0 {
			continue
		}
		rec, err := sh.rowGroup(g, nil)
		if err != nil {
			return nil, err
		}
		err = fn(rec)
		rec.Release()
		if err != nil {
			return nil, fmt.Errorf("read %s: row group %d: %w", sh.path, g, err)
		}
	}
	return sh.schema, nil
}

// String describes the dataset in one line: kind, shards, rows and digest.
func (d *Dataset) String() string {
	m := d.Manifest
	return fmt.Sprintf("%s v%d, %d shards, %d rows, digest %s", m.Kind, m.SchemaVersion, len(m.Outputs), m.Rows(), m.Digest())
}
