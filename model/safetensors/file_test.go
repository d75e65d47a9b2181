package safetensors

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func sample() []Tensor {
	return []Tensor{
		Bytes("b.bias", BF16, []int64{3}, []byte{1, 2, 3, 4, 5, 6}),
		Bytes("a.weight", F32, []int64{2, 2}, []byte{0: 1, 15: 2}),
		Bytes("c.ids", I64, []int64{1}, []byte{7, 0, 0, 0, 0, 0, 0, 0}),
		Bytes("d.flag", Bool, []int64{}, []byte{1}),
	}
}

func TestRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.safetensors")
	if err := WriteFile(path, sample(), DefaultMetadata()); err != nil {
		t.Fatal(err)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if diff := cmp.Diff(DefaultMetadata(), f.Metadata()); diff != "" {
		t.Errorf("Metadata() (-want +got):\n%s", diff)
	}
	var gotNames []string
	for _, info := range f.Tensors() {
		gotNames = append(gotNames, info.Name)
		// The writer orders data by element size so each tensor is aligned to it.
		if info.Offset%info.DType.Size() != 0 {
			t.Errorf("%s: offset %d not aligned to %d", info.Name, info.Offset, info.DType.Size())
		}
	}
	if diff := cmp.Diff([]string{"a.weight", "b.bias", "c.ids", "d.flag"}, gotNames); diff != "" {
		t.Errorf("Tensors() names (-want +got):\n%s", diff)
	}
	for _, want := range sample() {
		info, ok := f.Info(want.Name)
		if !ok {
			t.Fatalf("Info(%q) missing", want.Name)
		}
		if diff := cmp.Diff(want.Shape, info.Shape); diff != "" {
			t.Errorf("%s shape (-want +got):\n%s", want.Name, diff)
		}
		var wantBuf bytes.Buffer
		want.WriteData(&wantBuf)
		got := make([]byte, info.Size)
		if err := f.ReadInto(want.Name, got); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, wantBuf.Bytes()) {
			t.Errorf("ReadInto(%q) = %v, want %v", want.Name, got, wantBuf.Bytes())
		}
	}
	if err := f.ReadInto("a.weight", make([]byte, 3)); err == nil {
		t.Error("ReadInto with a short buffer = nil, want error")
	}
	if err := f.ReadInto("nope", nil); !errors.Is(err, ErrNotFound) {
		t.Errorf("ReadInto(nope) = %v, want ErrNotFound", err)
	}
}

// TestEncodeLayout pins the exact bytes for a one-tensor file: the layout the
// reference Python writer produces (metadata first, header space-padded to 8).
func TestEncodeLayout(t *testing.T) {
	var buf bytes.Buffer
	err := Encode(&buf, []Tensor{Bytes("w", F32, []int64{2}, []byte{0, 0, 128, 63, 0, 0, 0, 64})}, DefaultMetadata())
	if err != nil {
		t.Fatal(err)
	}
	hdr := `{"__metadata__":{"format":"pt"},"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`
	for len(hdr)%8 != 0 {
		hdr += " "
	}
	want := binary.LittleEndian.AppendUint64(nil, uint64(len(hdr)))
	want = append(want, hdr...)
	want = append(want, 0, 0, 128, 63, 0, 0, 0, 64)
	if got := buf.Bytes(); !bytes.Equal(got, want) {
		t.Errorf("Encode() =\n%q\nwant\n%q", got, want)
	}
}

func TestEncodeErrors(t *testing.T) {
	tests := []struct {
		name    string
		tensors []Tensor
		want    string
	}{
		{"duplicate", []Tensor{Bytes("x", F32, []int64{1}, make([]byte, 4)), Bytes("x", U8, []int64{1}, []byte{0})}, "appears twice"},
		{"reserved", []Tensor{Bytes(MetadataKey, U8, []int64{1}, []byte{0})}, "reserved"},
		{"short data", []Tensor{Bytes("x", F32, []int64{2}, make([]byte, 4))}, "wrote 4 bytes"},
		{"bad dtype", []Tensor{Bytes("x", "F8", []int64{1}, []byte{0})}, "not writable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Encode(&bytes.Buffer{}, tt.tensors, nil)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Encode() = %v, want error containing %q", err, tt.want)
			}
		})
	}
}

// rawFile assembles a file from a literal header and a data section.
func rawFile(t *testing.T, hdr string, data []byte) string {
	t.Helper()
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(hdr)))
	b = append(append(b, hdr...), data...)
	path := filepath.Join(t.TempDir(), "bad.safetensors")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestOpenCorrupt(t *testing.T) {
	tests := []struct {
		name string
		hdr  string
		data int
		want string
	}{
		{"not json", `{"a":`, 0, "not a JSON object"},
		{"unknown dtype", `{"a":{"dtype":"F8","shape":[1],"data_offsets":[0,1]}}`, 1, `unknown dtype "F8"`},
		{"size mismatch", `{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}`, 4, "needs 8 bytes"},
		{"past end", `{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, 4, "outside data section"},
		{"negative dim", `{"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}}`, 4, "negative or overflows"},
		{"overflow", `{"a":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,4]}}`, 4, "negative or overflows"},
		{"overlap", `{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[2,6]}}`, 6, "overlaps"},
		{"gap", `{"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, 8, "leaves a gap"},
		{"trailing bytes", `{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`, 8, "cover 4 of 8"},
		{"offsets arity", `{"a":{"dtype":"F32","shape":[1],"data_offsets":[0]}}`, 4, "want 2"},
		{"metadata not strings", `{"__metadata__":{"format":1}}`, 0, "not a string map"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Open(rawFile(t, tt.hdr, make([]byte, tt.data)))
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Open() = %v, want ErrCorrupt containing %q", err, tt.want)
			}
		})
	}
}

func TestOpenBadLength(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name string
		b    []byte
	}{
		{"short", []byte{1, 2, 3}},
		{"header past end", binary.LittleEndian.AppendUint64(nil, 100)},
		{"huge header", binary.LittleEndian.AppendUint64(nil, 1<<62)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(dir, tt.name)
			os.WriteFile(path, tt.b, 0o644)
			if _, err := Open(path); !errors.Is(err, ErrCorrupt) {
				t.Errorf("Open() = %v, want ErrCorrupt", err)
			}
		})
	}
}

// FuzzParseHeader checks that an untrusted header either parses into tensors that
// tile the data section or fails; it never panics.
func FuzzParseHeader(f *testing.F) {
	f.Add([]byte(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`), int64(4))
	f.Add([]byte(`{"__metadata__":{"format":"pt"}}`), int64(0))
	f.Add([]byte(`{"a":{"dtype":"BF16","shape":[9223372036854775807],"data_offsets":[0,2]}}`), int64(2))
	f.Fuzz(func(t *testing.T, hdr []byte, size int64) {
		if size < 0 {
			return
		}
		infos, _, err := ParseHeader(hdr, size, 8)
		if err != nil {
			return
		}
		var sum int64
		for _, i := range infos {
			if i.Offset < 8 || i.Offset+i.Size > 8+size {
				t.Fatalf("tensor %q range [%d, %d) outside data", i.Name, i.Offset, i.Offset+i.Size)
			}
			sum += i.Size
		}
		if sum != size {
			t.Fatalf("tensors cover %d bytes, data has %d", sum, size)
		}
	})
}
