package format

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"slices"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
)

// Defaults for shard writing. Row groups of 4096 rows keep a reader's working set to
// a few MB even for rollout rows with long prompt_ids, and zstd level 3 is zstd's own
// default speed/ratio trade-off.
const (
	DefaultRowGroupRows = 4096
	DefaultZstdLevel    = 3
)

// An Option configures a Writer or a Reader. Options that do not apply to one of them
// are ignored by it.
type Option func(*options) error

type options struct {
	rowGroupRows int
	zstdLevel    int
	mem          memory.Allocator
	verify       bool
	optional     map[string]bool // optional columns to write
}

func newOptions(opts []Option) (options, error) {
	o := options{
		rowGroupRows: DefaultRowGroupRows,
		zstdLevel:    DefaultZstdLevel,
		mem:          memory.DefaultAllocator,
		verify:       true,
	}
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return options{}, err
		}
	}
	return o, nil
}

// WithRowGroupRows sets the rows per Parquet row group (writer). A reader holds one
// row group in memory at a time.
func WithRowGroupRows(n int) Option {
	return func(o *options) error {
		if n < 1 {
			return fmt.Errorf("row group rows %d: want at least 1", n)
		}
		o.rowGroupRows = n
		return nil
	}
}

// WithZstdLevel sets the zstd compression level (writer), 1 (fastest) to 22.
func WithZstdLevel(level int) Option {
	return func(o *options) error {
		if level < 1 || level > 22 {
			return fmt.Errorf("zstd level %d: want 1..22", level)
		}
		o.zstdLevel = level
		return nil
	}
}

// WithAllocator sets the Arrow allocator (writer and reader); tests pass a checked
// allocator to prove every buffer is released.
func WithAllocator(mem memory.Allocator) Option {
	return func(o *options) error {
		if mem == nil {
			return errors.New("nil allocator")
		}
		o.mem = mem
		return nil
	}
}

// WithVerify sets whether a reader checks a dataset shard's size and sha256 against
// the manifest before decoding it (default true). Verifying reads the whole shard into
// memory once; without it the shard streams from disk and only its size is checked.
func WithVerify(verify bool) Option {
	return func(o *options) error {
		o.verify = verify
		return nil
	}
}

// WithOptional names optional columns the writer writes (writer). An optional column
// (a field tagged `arrow:"name,optional"`) is left out of a shard unless named here, so
// a dataset whose rows never fill it keeps the bytes it had before the column existed;
// a reader gives its zero value where a shard lacks it. Writing a row whose left-out
// optional column holds a value is an error, never a silent drop.
func WithOptional(names ...string) Option {
	return func(o *options) error {
		if o.optional == nil {
			o.optional = map[string]bool{}
		}
		for _, n := range names {
			o.optional[n] = true
		}
		return nil
	}
}

// Writer streams rows of one kind into a Parquet shard: zstd, the Arrow schema stored,
// mempo.kind and mempo.schema_version in the key-value metadata. Rows are buffered up
// to one row group and flushed. The output is a function of the rows and options only,
// so identical input gives byte-identical files.
type Writer[R Row] struct {
	name string // file path for errors and Output; "" for a plain io.Writer
	file *os.File
	sink *hashWriter
	fw   *pqarrow.FileWriter
	rb   *array.RecordBuilder
	app  []func(unsafe.Pointer)
	// left are the optional columns left out, checked to be zero in every row.
	left   []column
	groupN int // rows per row group
	buffer int // rows in rb not yet flushed
	rows   int64
	err    error // sticky: a failed writer accepts nothing more
	done   bool
	out    Output
}

// NewWriter returns a writer of R rows to w. Close finishes the file; it does not
// close w.
func NewWriter[R Row](w io.Writer, opts ...Option) (*Writer[R], error) {
	return newWriter[R](w, "", nil, opts)
}

// Create creates the shard file path (which must not exist) and returns a writer to
// it. Close fsyncs and closes the file; a failed Close or an Abort removes it, so a
// partial shard is never left behind.
func Create[R Row](path string, opts ...Option) (*Writer[R], error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return nil, fmt.Errorf("write %s: %w", path, err)
	}
	w, err := newWriter[R](f, path, f, opts)
	if err != nil {
		f.Close()
		os.Remove(path)
		return nil, err
	}
	return w, nil
}

func newWriter[R Row](w io.Writer, name string, f *os.File, opts []Option) (*Writer[R], error) {
	label := name
	if label == "" {
		label = "shard"
	}
	o, err := newOptions(opts)
	if err != nil {
		return nil, fmt.Errorf("write %s: %w", label, err)
	}
	l := layoutFor[R]()
	for n := range o.optional {
		if !slices.Contains(OptionalColumns[R](), n) {
			return nil, fmt.Errorf("write %s: WithOptional(%q): not an optional column of kind %s (optional: %v)", label, n, l.kind, OptionalColumns[R]())
		}
	}
	schema, written := l.without(o.optional)
	props := parquet.NewWriterProperties(
		parquet.WithAllocator(o.mem),
		parquet.WithCompression(compress.Codecs.Zstd),
		parquet.WithCompressionLevel(o.zstdLevel),
		parquet.WithMaxRowGroupLength(int64(o.rowGroupRows)),
		parquet.WithStats(true),
	)
	sink := &hashWriter{w: w, h: sha256.New()}
	var fw *pqarrow.FileWriter
	err = sink.guard(label, func() (err error) {
		fw, err = pqarrow.NewFileWriter(schema, sink, props,
			pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema(), pqarrow.WithAllocator(o.mem)))
		return err
	})
	if err != nil {
		return nil, err
	}
	rb := array.NewRecordBuilder(o.mem, schema)
	var app []func(unsafe.Pointer)
	var left []column
	for i, c := range l.cols {
		if !written[i] {
			left = append(left, c)
			continue
		}
		enc := c.enc(rb.Field(len(app)))
		off := c.offset
		app = append(app, func(p unsafe.Pointer) { enc(unsafe.Add(p, off)) })
	}
	return &Writer[R]{name: name, file: f, sink: sink, fw: fw, rb: rb, app: app, left: left, groupN: o.rowGroupRows}, nil
}

func (w *Writer[R]) label() string {
	if w.name == "" {
		return "shard"
	}
	return w.name
}

// Write appends rows. After an error the writer is failed: every later call returns
// the same error, and Close removes a created file.
func (w *Writer[R]) Write(rows ...R) error {
	if w.err != nil {
		return w.err
	}
	if w.done {
		return fmt.Errorf("write %s: writer is closed", w.label())
	}
	for i := range rows {
		p := unsafe.Pointer(&rows[i])
		for _, c := range w.left {
			if !c.zero(unsafe.Add(p, c.offset)) {
				w.err = fmt.Errorf("write %s: row %d: optional column %q holds a value but the writer leaves it out: pass format.WithOptional(%q)",
					w.label(), w.rows, c.name, c.name)
				return w.err
			}
		}
		for _, a := range w.app {
			a(p)
		}
		w.buffer++
		w.rows++
		if w.buffer == w.groupN {
			if err := w.flush(); err != nil {
				return err
			}
		}
	}
	return nil
}

// flush writes the buffered rows as one row group.
func (w *Writer[R]) flush() error {
	if w.buffer == 0 {
		return nil
	}
	rec := w.rb.NewRecordBatch()
	defer rec.Release()
	w.buffer = 0
	if err := w.sink.guard(w.label(), func() error { return w.fw.Write(rec) }); err != nil {
		w.err = err
		return err
	}
	return nil
}

// Close flushes the last row group, writes the footer and returns the number of rows
// written. Output describes the file once Close has succeeded.
func (w *Writer[R]) Close() (int64, error) {
	if w.done {
		return w.rows, w.err
	}
	w.done = true
	err := w.err
	if err == nil {
		err = w.flush()
	}
	w.rb.Release()
	if cerr := w.sink.guard(w.label(), w.fw.Close); err == nil {
		err = cerr
	}
	if w.file != nil {
		if err == nil {
			if serr := w.file.Sync(); serr != nil {
				err = fmt.Errorf("write %s: %w", w.name, serr)
			}
		}
		if cerr := w.file.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("write %s: %w", w.name, cerr)
		}
		if err != nil {
			os.Remove(w.name)
		}
	}
	if err != nil {
		w.err = err
		return w.rows, err
	}
	w.out = Output{
		File:   filepath.Base(w.name),
		SHA256: hex.EncodeToString(w.sink.h.Sum(nil)),
		Bytes:  w.sink.n,
		Rows:   w.rows,
	}
	if w.name == "" {
		w.out.File = ""
	}
	return w.rows, nil
}

// Abort discards the writer: it releases its memory and removes a created file.
func (w *Writer[R]) Abort() {
	if w.done {
		return
	}
	w.done = true
	w.err = fmt.Errorf("write %s: aborted", w.label())
	w.rb.Release()
	w.sink.guard(w.label(), w.fw.Close)
	if w.file != nil {
		w.file.Close()
		os.Remove(w.name)
	}
}

// Output describes the finished file: base name (empty for NewWriter), sha256, size
// and rows, ready for a manifest. It is the zero Output before a successful Close.
func (w *Writer[R]) Output() Output { return w.out }

// hashWriter counts and hashes what reaches w, so a shard's manifest entry needs no
// second read of the file. It remembers the first error because the Parquet writer
// does not always surface sink errors.
type hashWriter struct {
	w   io.Writer
	h   hash.Hash
	n   int64
	err error
}

func (hw *hashWriter) Write(p []byte) (int, error) {
	if hw.err != nil {
		return 0, hw.err
	}
	n, err := hw.w.Write(p)
	hw.h.Write(p[:n])
	hw.n += int64(n)
	if err != nil {
		hw.err = err
	}
	return n, err
}

// guard runs a Parquet writer call, which panics on some sink failures (for example
// "failed to write magic number"), and turns a panic or error into one error naming
// the file; a sink error is kept in the chain so errors.Is finds e.g. ENOSPC.
func (hw *hashWriter) guard(label string, fn func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
		switch {
		case hw.err != nil:
			err = fmt.Errorf("write %s: %w", label, hw.err)
		case err != nil:
			err = fmt.Errorf("write %s: %w", label, err)
		}
	}()
	return fn()
}
