package format

import (
	"fmt"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow"
)

// Reader streams typed rows from one shard file or from every shard of a dataset, in
// manifest order, holding one row group in memory at a time. Each shard's kind, schema
// version and columns are checked before any row is returned; dataset shards are also
// checked against the manifest's size and sha256 (see WithVerify).
//
//	r, err := format.OpenShards[format.Rollout](ds)
//	…
//	defer r.Close()
//	for r.Next() {
//		use(r.Row())
//	}
//	if err := r.Err(); err != nil { … }
type Reader[R Row] struct {
	l    *layout
	o    options
	srcs []source
	next int // index of the next source to open

	cur    *shard
	leaves []int
	cols   []int
	rg     int   // next row group of cur
	base   int64 // row index in cur of buf[0], for errors

	buf []R
	bi  int
	row R
	err error
}

// OpenFile opens one shard file, with no manifest to check it against.
func OpenFile[R Row](path string, opts ...Option) (*Reader[R], error) {
	return newReader[R]([]source{{path: path}}, opts)
}

func newReader[R Row](srcs []source, opts []Option) (*Reader[R], error) {
	o, err := newOptions(opts)
	if err != nil {
		return nil, fmt.Errorf("read: %w", err)
	}
	r := &Reader[R]{l: layoutFor[R](), o: o, srcs: srcs}
	// Open the first shard now so that a bad kind, version or column fails the open,
	// not the first Next.
	if len(srcs) > 0 {
		if err := r.openNext(); err != nil {
			return nil, err
		}
	}
	return r, nil
}

func (r *Reader[R]) openNext() error {
	src := r.srcs[r.next]
	r.next++
	s, err := openSource(src, r.o)
	if err != nil {
		return err
	}
	leaves, cols, err := s.check(r.l)
	if err == nil && src.want != nil {
		err = claims(s, *src.want)
	}
	if err != nil {
		s.close()
		return err
	}
	r.cur, r.leaves, r.cols, r.rg, r.base = s, leaves, cols, 0, 0
	r.buf, r.bi = r.buf[:0], 0
	return nil
}

// Next advances to the next row; it returns false at the end or on an error (Err).
func (r *Reader[R]) Next() bool {
	for r.err == nil {
		if r.bi < len(r.buf) {
			r.row = r.buf[r.bi]
			r.bi++
			return true
		}
		switch {
		case r.cur != nil && r.rg < r.cur.numRowGroups():
			r.err = r.readRowGroup()
		case r.cur != nil:
			r.err = r.cur.close()
			r.cur = nil
		case r.next < len(r.srcs):
			r.err = r.openNext()
		default:
			return false
		}
	}
	return false
}

// Row returns the current row.
func (r *Reader[R]) Row() R { return r.row }

// Err returns the error that stopped Next, if any.
func (r *Reader[R]) Err() error { return r.err }

// Close releases the open shard. It is safe to call more than once.
func (r *Reader[R]) Close() error {
	r.buf = nil
	if r.cur == nil {
		return nil
	}
	err := r.cur.close()
	r.cur = nil
	return err
}

func (r *Reader[R]) readRowGroup() error {
	i := r.rg
	r.rg++
	r.base += int64(len(r.buf))
	r.buf, r.bi = r.buf[:0], 0
	if r.cur.pf.MetaData().RowGroup(i).NumRows() == 0 {
		return nil
	}
	rec, err := r.cur.rowGroup(i, r.leaves)
	if err != nil {
		return err
	}
	defer rec.Release()
	return r.decode(rec, i)
}

// decode fills r.buf with rec's rows. Arrays decoded from a damaged file can hold
// offsets past their buffers, so a panic here is corruption, reported as such.
func (r *Reader[R]) decode(rec arrow.RecordBatch, group int) (err error) {
	path := r.cur.path
	defer func() {
		if p := recover(); p != nil {
			r.buf = r.buf[:0]
			err = fmt.Errorf("read %s: row group %d: %v: %w", path, group, p, ErrCorrupt)
		}
	}()
	n := int(rec.NumRows())
	sets := make([]func(int, unsafe.Pointer), len(r.l.cols))
	for j, c := range r.l.cols {
		if r.cols[j] < 0 {
			sets[j] = func(int, unsafe.Pointer) {} // an optional column the shard lacks
			continue
		}
		a := rec.Column(r.cols[j])
		if a.Len() != n {
			return fmt.Errorf("read %s: column %q: %d values, want %d: %w", path, c.name, a.Len(), n, ErrCorrupt)
		}
		if !c.nullable && a.NullN() > 0 {
			for i := range n {
				if a.IsNull(i) {
					return fmt.Errorf("read %s: row %d: column %q: null, want a value: %w", path, r.base+int64(i), c.name, ErrSchemaMismatch)
				}
			}
		}
		set, ok := c.dec(a)
		if !ok {
			return fmt.Errorf("read %s: column %q: type %s, want %s: %w", path, c.name, a.DataType(), c.typ, ErrSchemaMismatch)
		}
		off := c.offset
		sets[j] = func(i int, p unsafe.Pointer) { set(i, unsafe.Add(p, off)) }
	}
	if cap(r.buf) < n {
		r.buf = make([]R, n)
	}
	r.buf = r.buf[:n]
	for i := range n {
		var zero R
		r.buf[i] = zero
		p := unsafe.Pointer(&r.buf[i])
		for _, set := range sets {
			set(i, p)
		}
	}
	return nil
}

// ReadAll reads every remaining row of r and closes it.
func ReadAll[R Row](r *Reader[R]) ([]R, error) {
	var rows []R
	for r.Next() {
		rows = append(rows, r.Row())
	}
	err := r.Err()
	if cerr := r.Close(); err == nil {
		err = cerr
	}
	return rows, err
}
