// Package safetensors reads and writes the safetensors checkpoint format used by
// Hugging Face: an 8-byte little-endian header length, a JSON header naming each
// tensor's dtype, shape and byte range, then the raw little-endian tensor bytes
// (https://github.com/huggingface/safetensors#format).
//
// The package is pure Go and knows nothing about tensors beyond bytes and offsets:
// callers allocate the destination (for example a libtorch tensor) and ReadInto
// fills it with one ReadAt, so a loader never holds two copies of the weights.
package safetensors

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"os"
	"sort"
)

// ErrCorrupt marks a file whose header or layout is invalid.
var ErrCorrupt = errors.New("corrupt safetensors file")

// ErrNotFound marks a tensor name absent from a file or set of shards.
var ErrNotFound = errors.New("tensor not found")

// MaxHeaderBytes bounds the JSON header; the reference implementation uses the same
// 100 MB limit so a corrupt length cannot make us allocate gigabytes.
const MaxHeaderBytes = 100 << 20

// MetadataKey is the reserved header entry holding string metadata.
const MetadataKey = "__metadata__"

// DType is a safetensors dtype name as stored in the header.
type DType string

// Dtypes of the safetensors specification.
const (
	F64  DType = "F64"
	F32  DType = "F32"
	F16  DType = "F16"
	BF16 DType = "BF16"
	I64  DType = "I64"
	I32  DType = "I32"
	I16  DType = "I16"
	I8   DType = "I8"
	U64  DType = "U64"
	U32  DType = "U32"
	U16  DType = "U16"
	U8   DType = "U8"
	Bool DType = "BOOL"
)

var dtypeSize = map[DType]int64{
	F64: 8, F32: 4, F16: 2, BF16: 2, I64: 8, I32: 4, I16: 2, I8: 1,
	U64: 8, U32: 4, U16: 2, U8: 1, Bool: 1,
}

// Size is the element size in bytes, or 0 for an unknown dtype.
func (d DType) Size() int64 { return dtypeSize[d] }

// Info locates one tensor inside a file.
type Info struct {
	Name  string  // header key, e.g. "model.norm.weight"
	DType DType   // element type
	Shape []int64 // row-major dimensions; empty for a scalar
	// Offset is the absolute byte offset of the tensor's data in the file and Size its
	// length in bytes; both are validated against the file size and the shape.
	Offset, Size int64
}

// File is an open safetensors file. Its methods are safe for concurrent use: reads
// go through ReadAt.
type File struct {
	path     string
	f        *os.File
	tensors  []Info // sorted by name
	byName   map[string]int
	metadata map[string]string
}

// Open reads and validates the header of the safetensors file at path.
func Open(path string) (*File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open safetensors: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("stat %s: %w", path, err)
	}
	infos, meta, err := readHeader(f, st.Size())
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	byName := make(map[string]int, len(infos))
	for i, t := range infos {
		byName[t.Name] = i
	}
	return &File{path: path, f: f, tensors: infos, byName: byName, metadata: meta}, nil
}

// Path is the file's path as given to Open.
func (f *File) Path() string { return f.path }

// Tensors lists the file's tensors sorted by name. The slice is shared; do not modify it.
func (f *File) Tensors() []Info { return f.tensors }

// Metadata is the header's __metadata__ map (nil when absent).
func (f *File) Metadata() map[string]string { return f.metadata }

// Info returns the named tensor's location.
func (f *File) Info(name string) (Info, bool) {
	i, ok := f.byName[name]
	if !ok {
		return Info{}, false
	}
	return f.tensors[i], true
}

// ReadInto copies the named tensor's bytes into dst, whose length must equal the
// tensor's size. dst is typically the storage of a freshly allocated tensor.
func (f *File) ReadInto(name string, dst []byte) error {
	t, ok := f.Info(name)
	if !ok {
		return fmt.Errorf("read %s: %q: %w", f.path, name, ErrNotFound)
	}
	if int64(len(dst)) != t.Size {
		return fmt.Errorf("read %s: %q: destination holds %d bytes, tensor has %d (%s %v)", f.path, name, len(dst), t.Size, t.DType, t.Shape)
	}
	if _, err := f.f.ReadAt(dst, t.Offset); err != nil {
		return fmt.Errorf("read %s: %q at offset %d: %w", f.path, name, t.Offset, err)
	}
	return nil
}

// Close releases the file.
func (f *File) Close() error { return f.f.Close() }

type headerEntry struct {
	DType       DType   `json:"dtype"`
	Shape       []int64 `json:"shape"`
	DataOffsets []int64 `json:"data_offsets"`
}

// readHeader parses and validates the header of a file of fileSize bytes.
func readHeader(r io.ReaderAt, fileSize int64) ([]Info, map[string]string, error) {
	if fileSize < 8 {
		return nil, nil, fmt.Errorf("file is %d bytes, shorter than the 8-byte header length: %w", fileSize, ErrCorrupt)
	}
	var lenBuf [8]byte
	if _, err := r.ReadAt(lenBuf[:], 0); err != nil {
		return nil, nil, fmt.Errorf("header length: %w", err)
	}
	n := binary.LittleEndian.Uint64(lenBuf[:])
	if n > MaxHeaderBytes {
		return nil, nil, fmt.Errorf("header length %d exceeds %d bytes: %w", n, MaxHeaderBytes, ErrCorrupt)
	}
	if int64(n) > fileSize-8 {
		return nil, nil, fmt.Errorf("header length %d exceeds file size %d: %w", n, fileSize, ErrCorrupt)
	}
	hdr := make([]byte, n)
	if _, err := r.ReadAt(hdr, 8); err != nil {
		return nil, nil, fmt.Errorf("header: %w", err)
	}
	return ParseHeader(hdr, fileSize-8-int64(n), 8+int64(n))
}

// ParseHeader validates a JSON header against a data section of dataSize bytes that
// starts at absolute offset base. Every tensor must have a known dtype, a
// non-negative shape whose byte size matches its range, and the ranges must tile the
// data section exactly: no overlap, no gap, nothing past the end (the reference
// implementation enforces the same).
func ParseHeader(hdr []byte, dataSize, base int64) ([]Info, map[string]string, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(hdr, &raw); err != nil {
		return nil, nil, fmt.Errorf("header is not a JSON object: %w: %w", err, ErrCorrupt)
	}
	var meta map[string]string
	if m, ok := raw[MetadataKey]; ok {
		if err := json.Unmarshal(m, &meta); err != nil {
			return nil, nil, fmt.Errorf("%s is not a string map: %w: %w", MetadataKey, err, ErrCorrupt)
		}
		delete(raw, MetadataKey)
	}
	infos := make([]Info, 0, len(raw))
	for name, msg := range raw {
		var e headerEntry
		if err := json.Unmarshal(msg, &e); err != nil {
			return nil, nil, fmt.Errorf("tensor %q: %w: %w", name, err, ErrCorrupt)
		}
		size := e.DType.Size()
		if size == 0 {
			return nil, nil, fmt.Errorf("tensor %q: unknown dtype %q: %w", name, e.DType, ErrCorrupt)
		}
		if len(e.DataOffsets) != 2 {
			return nil, nil, fmt.Errorf("tensor %q: data_offsets has %d values, want 2: %w", name, len(e.DataOffsets), ErrCorrupt)
		}
		begin, end := e.DataOffsets[0], e.DataOffsets[1]
		if begin < 0 || end < begin || end > dataSize {
			return nil, nil, fmt.Errorf("tensor %q: data_offsets [%d, %d] outside data section of %d bytes: %w", name, begin, end, dataSize, ErrCorrupt)
		}
		nbytes, ok := byteSize(e.Shape, size)
		if !ok {
			return nil, nil, fmt.Errorf("tensor %q: shape %v is negative or overflows: %w", name, e.Shape, ErrCorrupt)
		}
		if nbytes != end-begin {
			return nil, nil, fmt.Errorf("tensor %q: %s %v needs %d bytes, data_offsets [%d, %d] hold %d: %w", name, e.DType, e.Shape, nbytes, begin, end, end-begin, ErrCorrupt)
		}
		shape := e.Shape
		if shape == nil {
			shape = []int64{}
		}
		infos = append(infos, Info{Name: name, DType: e.DType, Shape: shape, Offset: base + begin, Size: nbytes})
	}
	sort.Slice(infos, func(i, j int) bool {
		if infos[i].Offset != infos[j].Offset {
			return infos[i].Offset < infos[j].Offset
		}
		return infos[i].Size < infos[j].Size
	})
	next := base
	for _, t := range infos {
		if t.Offset != next {
			if t.Offset < next {
				return nil, nil, fmt.Errorf("tensor %q at offset %d overlaps the previous tensor ending at %d: %w", t.Name, t.Offset-base, next-base, ErrCorrupt)
			}
			return nil, nil, fmt.Errorf("tensor %q at offset %d leaves a gap after offset %d: %w", t.Name, t.Offset-base, next-base, ErrCorrupt)
		}
		next = t.Offset + t.Size
	}
	if next != base+dataSize {
		return nil, nil, fmt.Errorf("tensors cover %d of %d data bytes: %w", next-base, dataSize, ErrCorrupt)
	}
	sort.Slice(infos, func(i, j int) bool { return infos[i].Name < infos[j].Name })
	return infos, meta, nil
}

// byteSize multiplies shape by the element size, reporting false on a negative
// dimension or int64 overflow.
func byteSize(shape []int64, elem int64) (int64, bool) {
	n := uint64(elem)
	for _, d := range shape {
		if d < 0 {
			return 0, false
		}
		hi, lo := bits.Mul64(n, uint64(d))
		if hi != 0 || lo > math.MaxInt64 {
			return 0, false
		}
		n = lo
	}
	return int64(n), true
}
