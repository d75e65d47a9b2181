package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"sort"

	"github.com/mempo/mempo/internal/renameio"
)

// Tensor is one entry to write. WriteData is called exactly once, when the writer
// reaches the tensor, and must write exactly the tensor's byte size (row-major,
// little-endian); staging one tensor at a time keeps a saver from holding a second
// copy of the whole model.
type Tensor struct {
	Name      string
	DType     DType
	Shape     []int64
	WriteData func(w io.Writer) error
}

// Bytes wraps an in-memory tensor.
func Bytes(name string, dtype DType, shape []int64, data []byte) Tensor {
	return Tensor{Name: name, DType: dtype, Shape: shape, WriteData: func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	}}
}

// DefaultMetadata is what PyTorch's safetensors writer stores and what HF transformers
// checks before loading a checkpoint.
func DefaultMetadata() map[string]string { return map[string]string{"format": "pt"} }

// Size is the tensor's byte size, or an error for an unknown dtype or bad shape.
func (t Tensor) Size() (int64, error) {
	n, ok := byteSize(t.Shape, t.DType.Size())
	if t.DType.Size() == 0 || !ok {
		return 0, fmt.Errorf("tensor %q: dtype %q shape %v: not writable", t.Name, t.DType, t.Shape)
	}
	return n, nil
}

// layout orders tensors by decreasing element size, then name, as the reference
// writer does: with the header padded to 8 bytes every tensor then starts at an
// offset aligned to its element size, which lets readers map the data in place.
func layout(tensors []Tensor) ([]Tensor, []int64, error) {
	out := append([]Tensor(nil), tensors...)
	sort.SliceStable(out, func(i, j int) bool {
		si, sj := out[i].DType.Size(), out[j].DType.Size()
		if si != sj {
			return si > sj
		}
		return out[i].Name < out[j].Name
	})
	offsets := make([]int64, len(out)+1)
	for i, t := range out {
		if t.Name == MetadataKey || t.Name == "" {
			return nil, nil, fmt.Errorf("tensor name %q is reserved or empty", t.Name)
		}
		n, err := t.Size()
		if err != nil {
			return nil, nil, err
		}
		offsets[i+1] = offsets[i] + n
	}
	seen := make(map[string]bool, len(out))
	for _, t := range out {
		if seen[t.Name] {
			return nil, nil, fmt.Errorf("tensor %q appears twice", t.Name)
		}
		seen[t.Name] = true
	}
	return out, offsets, nil
}

// header renders the JSON header, keys sorted with __metadata__ first, padded with
// spaces to a multiple of 8 bytes.
func header(tensors []Tensor, offsets []int64, meta map[string]string) ([]byte, error) {
	type entry struct {
		DType       DType    `json:"dtype"`
		Shape       []int64  `json:"shape"`
		DataOffsets [2]int64 `json:"data_offsets"`
	}
	byName := make(map[string]int, len(tensors))
	names := make([]string, 0, len(tensors))
	for i, t := range tensors {
		byName[t.Name] = i
		names = append(names, t.Name)
	}
	sort.Strings(names)
	var buf bytes.Buffer
	buf.WriteByte('{')
	if meta != nil {
		m, err := json.Marshal(meta)
		if err != nil {
			return nil, fmt.Errorf("metadata: %w", err)
		}
		buf.WriteString(`"` + MetadataKey + `":`)
		buf.Write(m)
	}
	for _, name := range names {
		i := byName[name]
		t := tensors[i]
		shape := t.Shape
		if shape == nil {
			shape = []int64{}
		}
		k, _ := json.Marshal(name)
		v, err := json.Marshal(entry{DType: t.DType, Shape: shape, DataOffsets: [2]int64{offsets[i], offsets[i+1]}})
		if err != nil {
			return nil, fmt.Errorf("tensor %q: %w", name, err)
		}
		if buf.Len() > 1 {
			buf.WriteByte(',')
		}
		buf.Write(k)
		buf.WriteByte(':')
		buf.Write(v)
	}
	buf.WriteByte('}')
	for buf.Len()%8 != 0 {
		buf.WriteByte(' ')
	}
	return buf.Bytes(), nil
}

// countWriter counts bytes on their way to w.
type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// Encode writes a complete safetensors stream to w.
func Encode(w io.Writer, tensors []Tensor, meta map[string]string) error {
	ordered, offsets, err := layout(tensors)
	if err != nil {
		return err
	}
	hdr, err := header(ordered, offsets, meta)
	if err != nil {
		return err
	}
	var lenBuf [8]byte
	binary.LittleEndian.PutUint64(lenBuf[:], uint64(len(hdr)))
	if _, err := w.Write(lenBuf[:]); err != nil {
		return err
	}
	if _, err := w.Write(hdr); err != nil {
		return err
	}
	for i, t := range ordered {
		cw := &countWriter{w: w}
		if err := t.WriteData(cw); err != nil {
			return fmt.Errorf("tensor %q: %w", t.Name, err)
		}
		if want := offsets[i+1] - offsets[i]; cw.n != want {
			return fmt.Errorf("tensor %q: wrote %d bytes, %s %v needs %d", t.Name, cw.n, t.DType, t.Shape, want)
		}
	}
	return nil
}

// WriteFile writes a safetensors file atomically: into a temporary file beside path,
// synced, then renamed over path.
func WriteFile(path string, tensors []Tensor, meta map[string]string) error {
	return renameio.Write(path, func(w io.Writer) error { return Encode(w, tensors, meta) })
}
