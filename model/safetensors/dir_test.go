package safetensors

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func readAll(t *testing.T, s *Set) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	for _, info := range s.Tensors() {
		b := make([]byte, info.Size)
		if err := s.ReadInto(info.Name, b); err != nil {
			t.Fatal(err)
		}
		out[info.Name] = b
	}
	return out
}

func wantAll() map[string][]byte {
	out := map[string][]byte{}
	for _, tns := range sample() {
		var b bytes.Buffer
		tns.WriteData(&b)
		out[tns.Name] = b.Bytes()
	}
	return out
}

func TestWriteDir(t *testing.T) {
	tests := []struct {
		name      string
		maxShard  int64
		wantFiles []string
	}{
		{"single", 0, []string{SingleFile}},
		{"fits", 1 << 20, []string{SingleFile}},
		// a.weight 16 B, b.bias 6 B, c.ids 8 B, d.flag 1 B in name order, 14 B shards.
		{"sharded", 14, []string{ShardName(0, 3), ShardName(1, 3), ShardName(2, 3), IndexFile}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			files, err := WriteDir(dir, sample(), tt.maxShard)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, f := range files {
				got = append(got, filepath.Base(f))
			}
			if diff := cmp.Diff(tt.wantFiles, got); diff != "" {
				t.Errorf("WriteDir files (-want +got):\n%s", diff)
			}
			s, err := OpenDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if diff := cmp.Diff(wantAll(), readAll(t, s)); diff != "" {
				t.Errorf("tensors (-want +got):\n%s", diff)
			}
		})
	}
}

func TestWriteDirReplacesOtherLayout(t *testing.T) {
	dir := t.TempDir()
	if _, err := WriteDir(dir, sample(), 14); err != nil {
		t.Fatal(err)
	}
	if _, err := WriteDir(dir, sample()[:1], 0); err != nil {
		t.Fatal(err)
	}
	left, _ := filepath.Glob(filepath.Join(dir, "*"))
	if len(left) != 1 || filepath.Base(left[0]) != SingleFile {
		t.Errorf("dir holds %v, want only %s", left, SingleFile)
	}
}

func TestIndexContents(t *testing.T) {
	dir := t.TempDir()
	if _, err := WriteDir(dir, sample(), 14); err != nil {
		t.Fatal(err)
	}
	var idx Index
	data, _ := os.ReadFile(filepath.Join(dir, IndexFile))
	if err := json.Unmarshal(data, &idx); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"a.weight": ShardName(0, 3), "b.bias": ShardName(1, 3),
		"c.ids": ShardName(1, 3), "d.flag": ShardName(2, 3),
	}
	if diff := cmp.Diff(want, idx.WeightMap); diff != "" {
		t.Errorf("weight_map (-want +got):\n%s", diff)
	}
	if got := idx.Metadata["total_size"]; got != float64(31) {
		t.Errorf("total_size = %v, want 31", got)
	}
}

func TestOpenDirBadIndex(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(idx *Index)
		want   string
	}{
		{"path escape", func(idx *Index) { idx.WeightMap["a.weight"] = "../x.safetensors" }, "not a file name"},
		{"missing tensor", func(idx *Index) { idx.WeightMap["ghost"] = ShardName(0, 3) }, "does not hold it"},
		{"wrong shard", func(idx *Index) { idx.WeightMap["b.bias"] = ShardName(2, 3) }, "maps it to"},
		{"empty", func(idx *Index) { idx.WeightMap = nil }, "weight_map is empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if _, err := WriteDir(dir, sample(), 14); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, IndexFile)
			var idx Index
			data, _ := os.ReadFile(path)
			json.Unmarshal(data, &idx)
			tt.mutate(&idx)
			data, _ = json.Marshal(idx)
			os.WriteFile(path, data, 0o644)
			_, err := OpenDir(dir)
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("OpenDir() = %v, want ErrCorrupt containing %q", err, tt.want)
			}
		})
	}
}

func TestOpenDirEmpty(t *testing.T) {
	if _, err := OpenDir(t.TempDir()); !errors.Is(err, ErrNotFound) {
		t.Errorf("OpenDir(empty) = %v, want ErrNotFound", err)
	}
}
