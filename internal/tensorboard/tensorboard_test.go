package tensorboard

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// goldenWall and goldenScalars are what testdata/golden.py writes with TensorBoard's
// own protobuf classes and RecordWriter, given in an order Events has to sort.
const goldenWall = 1700000000.5

var goldenScalars = []Scalar{
	{Tag: "score/reward_mean", Step: 1 << 40, Value: 0.75},
	{Tag: "advantage/reward_mean", Step: 3, Value: 0.5},
	{Tag: "update/kl", Step: 7, Value: -0.0025},
	{Tag: "advantage/adv_std", Step: 3, Value: 1.25},
	{Tag: "update/kl", Step: 0, Value: 0},
}

func TestMaskedCRC(t *testing.T) {
	// CRC-32C's check value (RFC 3720 B.4) pins the table; the masked values are
	// TensorBoard's masked_crc32c (tensorboard.compat.tensorflow_stub.pywrap_tensorflow)
	// and the length CRC of golden.tfevents' first record, a 24-byte event.
	if got, want := crc32.Checksum([]byte("123456789"), castagnoli), uint32(0xe3069283); got != want {
		t.Fatalf("crc32c(123456789) = %08x, want %08x", got, want)
	}
	var len24 [8]byte
	binary.LittleEndian.PutUint64(len24[:], 24)
	tests := []struct {
		name string
		data []byte
		want uint32
	}{
		{"empty", nil, 0xa282ead8},
		{"check string", []byte("123456789"), 0xc78ab0e5},
		{"length 24", len24[:], 0x224b7fa3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := MaskedCRC(tt.data); got != tt.want {
				t.Errorf("MaskedCRC(%x) = %08x, want %08x", tt.data, got, tt.want)
			}
			// The mask as the format documents it, over the standard library's CRC.
			c := crc32.Checksum(tt.data, crc32.MakeTable(crc32.Castagnoli))
			if got, want := MaskedCRC(tt.data), ((c>>15)|(c<<17))+0xa282ead8; got != want {
				t.Errorf("MaskedCRC(%x) = %08x, want mask(%08x) = %08x", tt.data, got, c, want)
			}
		})
	}
}

func TestAppendRecord(t *testing.T) {
	data := []byte("abc")
	got := AppendRecord([]byte("x"), data)
	want := []byte("x")
	want = binary.LittleEndian.AppendUint64(want, 3)
	want = binary.LittleEndian.AppendUint32(want, MaskedCRC(want[1:9]))
	want = append(want, data...)
	want = binary.LittleEndian.AppendUint32(want, MaskedCRC(data))
	if !bytes.Equal(got, want) {
		t.Errorf("AppendRecord(x, abc) = %x, want %x", got, want)
	}
	recs, truncated, err := Records(got[1:])
	if err != nil || truncated || len(recs) != 1 || string(recs[0]) != "abc" {
		t.Errorf("Records(AppendRecord(abc)) = %q, truncated %v, %v; want [abc]", recs, truncated, err)
	}
}

func TestGolden(t *testing.T) {
	want, err := os.ReadFile(filepath.Join("testdata", "golden.tfevents"))
	if err != nil {
		t.Fatal(err)
	}
	evs := Events(goldenWall, goldenScalars)
	if got := Encode(evs); !bytes.Equal(got, want) {
		t.Errorf("Encode(Events(golden scalars)) =\n%x\nwant testdata/golden.tfevents (TensorBoard's bytes)\n%x", got, want)
	}
	decoded, err := Decode(want)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(evs, decoded); diff != "" {
		t.Errorf("Decode(golden.tfevents) (-want +got):\n%s", diff)
	}
}

func TestEvents(t *testing.T) {
	got := Events(2.5, []Scalar{{"b", 2, 1}, {"a", 2, 2}, {"a", 1, 3}})
	want := []Event{
		{WallTime: 2.5, FileVersion: FileVersion},
		{WallTime: 2.5, Step: 1, Values: []Value{{"a", 3}}},
		{WallTime: 2.5, Step: 2, Values: []Value{{"a", 2}, {"b", 1}}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Events (-want +got):\n%s", diff)
	}
}

// TestRoundTrip: every value survives Marshal and Unmarshal, including those proto3
// would leave out and float32's extremes.
func TestRoundTrip(t *testing.T) {
	for _, e := range []Event{
		{},
		{WallTime: -1, Step: -5},
		{Step: math.MaxInt64, Values: []Value{{"", 0}, {"t", float32(math.Inf(-1))}, {"u/v", math.MaxFloat32}}},
	} {
		got, err := Unmarshal(e.Marshal())
		if err != nil {
			t.Fatalf("Unmarshal(Marshal(%+v)): %v", e, err)
		}
		if diff := cmp.Diff(e, got); diff != "" {
			t.Errorf("Unmarshal(Marshal()) (-want +got):\n%s", diff)
		}
	}
	nan, err := Unmarshal(Event{Values: []Value{{"nan", float32(math.NaN())}}}.Marshal())
	if err != nil || len(nan.Values) != 1 || !math.IsNaN(float64(nan.Values[0].Value)) {
		t.Errorf("Unmarshal(Marshal(NaN)) = %+v, %v; want one NaN value", nan, err)
	}
}

// TestTruncated: a file cut anywhere decodes to its complete records, as TensorBoard
// reads a file a killed writer left; a flipped byte in a complete record is corrupt.
func TestTruncated(t *testing.T) {
	file := Encode(Events(goldenWall, goldenScalars))
	var ends []int // the end of each record
	for off := 0; off < len(file); {
		off += headerLen + int(binary.LittleEndian.Uint64(file[off:])) + footerLen
		ends = append(ends, off)
	}
	for n := range len(file) + 1 {
		evs, err := Decode(file[:n])
		complete := 0
		for _, e := range ends {
			if e <= n {
				complete++
			}
		}
		if err != nil || len(evs) != complete {
			t.Fatalf("Decode(first %d bytes) = %d events, %v; want %d", n, len(evs), err, complete)
		}
	}
	for _, off := range []int{3, 9, headerLen + 1, ends[0] - 1} {
		bad := bytes.Clone(file)
		bad[off] ^= 0x40
		if _, err := Decode(bad); !errors.Is(err, ErrCorrupt) {
			t.Errorf("Decode(byte %d flipped) = %v, want ErrCorrupt", off, err)
		}
	}
}

func TestWriteFile(t *testing.T) {
	dir := t.TempDir()
	name := FileName(time.Unix(1700000000, 0), "host", 42, "update.3")
	if want := "events.out.tfevents.1700000000.host.42.update.3"; name != want {
		t.Errorf("FileName = %q, want %q", name, want)
	}
	if !IsEventFile(name) || IsEventFile(".events-1.tmp") {
		t.Errorf("IsEventFile(%q) false or IsEventFile(temp name) true", name)
	}
	evs := Events(goldenWall, goldenScalars)
	path := filepath.Join(dir, name)
	if err := WriteFile(path, evs); err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 || ents[0].Name() != name {
		t.Errorf("dir holds %v, want only %s (no temp file left)", ents, name)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("Stat(%s) = %v, %v; want mode 0644", path, fi, err)
	}
	got, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(evs, got); diff != "" {
		t.Errorf("ReadFile (-want +got):\n%s", diff)
	}
	if err := WriteFile(filepath.Join(dir, "missing", name), evs); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("WriteFile into a missing dir = %v, want an error naming it", err)
	}
}
