package safetensors

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/mempo/mempo/internal/renameio"
)

// File names of the Hugging Face checkpoint layout.
const (
	SingleFile = "model.safetensors"
	IndexFile  = "model.safetensors.index.json"
)

// ShardName is the name of shard i (0-based) of n: model-00001-of-00003.safetensors.
func ShardName(i, n int) string { return fmt.Sprintf("model-%05d-of-%05d.safetensors", i+1, n) }

// Index is model.safetensors.index.json: which shard holds each tensor.
type Index struct {
	Metadata  map[string]any    `json:"metadata"`
	WeightMap map[string]string `json:"weight_map"`
}

// Set is the tensors of a checkpoint directory, from model.safetensors or from the
// shards an index names. Like HF transformers, a single file wins over an index.
type Set struct {
	dir    string
	files  []*File
	byName map[string]*File
	infos  []Info // sorted by name
}

// OpenDir opens the safetensors weights of the checkpoint directory dir.
func OpenDir(dir string) (*Set, error) {
	single := filepath.Join(dir, SingleFile)
	if _, err := os.Stat(single); err == nil {
		f, err := Open(single)
		if err != nil {
			return nil, err
		}
		return newSet(dir, []*File{f}, nil)
	}
	indexPath := filepath.Join(dir, IndexFile)
	data, err := os.ReadFile(indexPath)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("open checkpoint %s: neither %s nor %s exists: %w", dir, SingleFile, IndexFile, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("open checkpoint %s: %w", dir, err)
	}
	var idx Index
	if err := json.Unmarshal(data, &idx); err != nil {
		return nil, fmt.Errorf("read %s: %w: %w", indexPath, err, ErrCorrupt)
	}
	if len(idx.WeightMap) == 0 {
		return nil, fmt.Errorf("read %s: weight_map is empty: %w", indexPath, ErrCorrupt)
	}
	shards := map[string]bool{}
	for name, shard := range idx.WeightMap {
		// The index is untrusted: a shard must be a plain file name inside dir.
		if shard == "" || shard != filepath.Base(shard) || strings.HasPrefix(shard, ".") {
			return nil, fmt.Errorf("read %s: tensor %q: shard %q is not a file name in the checkpoint directory: %w", indexPath, name, shard, ErrCorrupt)
		}
		shards[shard] = true
	}
	names := make([]string, 0, len(shards))
	for s := range shards {
		names = append(names, s)
	}
	sort.Strings(names)
	files := make([]*File, 0, len(names))
	for _, s := range names {
		f, err := Open(filepath.Join(dir, s))
		if err != nil {
			closeAll(files)
			return nil, fmt.Errorf("shard named by %s: %w", indexPath, err)
		}
		files = append(files, f)
	}
	return newSet(dir, files, &idx)
}

func newSet(dir string, files []*File, idx *Index) (*Set, error) {
	s := &Set{dir: dir, files: files, byName: map[string]*File{}}
	for _, f := range files {
		for _, t := range f.Tensors() {
			if prev, dup := s.byName[t.Name]; dup {
				closeAll(files)
				return nil, fmt.Errorf("open checkpoint %s: tensor %q is in both %s and %s: %w", dir, t.Name, prev.Path(), f.Path(), ErrCorrupt)
			}
			if idx != nil {
				if want := idx.WeightMap[t.Name]; want != filepath.Base(f.Path()) {
					closeAll(files)
					return nil, fmt.Errorf("open checkpoint %s: tensor %q is in %s but %s maps it to %q: %w", dir, t.Name, f.Path(), IndexFile, want, ErrCorrupt)
				}
			}
			s.byName[t.Name] = f
			s.infos = append(s.infos, t)
		}
	}
	if idx != nil {
		for name, shard := range idx.WeightMap {
			if _, ok := s.byName[name]; !ok {
				closeAll(files)
				return nil, fmt.Errorf("open checkpoint %s: %s maps %q to %s, which does not hold it: %w", dir, IndexFile, name, shard, ErrCorrupt)
			}
		}
	}
	sort.Slice(s.infos, func(i, j int) bool { return s.infos[i].Name < s.infos[j].Name })
	return s, nil
}

func closeAll(files []*File) {
	for _, f := range files {
		f.Close()
	}
}

// Tensors lists every tensor of the checkpoint sorted by name.
func (s *Set) Tensors() []Info { return s.infos }

// Info returns the named tensor's location.
func (s *Set) Info(name string) (Info, bool) {
	f, ok := s.byName[name]
	if !ok {
		return Info{}, false
	}
	return f.Info(name)
}

// FileOf is the path of the file holding name ("" if none).
func (s *Set) FileOf(name string) string {
	if f, ok := s.byName[name]; ok {
		return f.Path()
	}
	return ""
}

// ReadInto copies the named tensor's bytes into dst (see File.ReadInto).
func (s *Set) ReadInto(name string, dst []byte) error {
	f, ok := s.byName[name]
	if !ok {
		return fmt.Errorf("read checkpoint %s: %q: %w", s.dir, name, ErrNotFound)
	}
	return f.ReadInto(name, dst)
}

// Close closes every file of the set.
func (s *Set) Close() error {
	var first error
	for _, f := range s.files {
		if err := f.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// WriteDir writes tensors into dir in HF layout: one model.safetensors when they fit
// in maxShardBytes (or maxShardBytes <= 0), else shards of at most maxShardBytes
// (a tensor larger than that gets a shard of its own) in name order plus
// model.safetensors.index.json. Weight files of the other layout left in dir are
// removed so a reader cannot pick up stale weights. It returns the files written.
func WriteDir(dir string, tensors []Tensor, maxShardBytes int64) ([]string, error) {
	sorted := append([]Tensor(nil), tensors...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	var shards [][]Tensor
	var cur []Tensor
	var curBytes, total int64
	for _, t := range sorted {
		n, err := t.Size()
		if err != nil {
			return nil, fmt.Errorf("write checkpoint %s: %w", dir, err)
		}
		if maxShardBytes > 0 && len(cur) > 0 && curBytes+n > maxShardBytes {
			shards = append(shards, cur)
			cur, curBytes = nil, 0
		}
		cur = append(cur, t)
		curBytes += n
		total += n
	}
	shards = append(shards, cur)
	if err := removeWeights(dir); err != nil {
		return nil, err
	}
	if len(shards) == 1 {
		path := filepath.Join(dir, SingleFile)
		if err := WriteFile(path, shards[0], DefaultMetadata()); err != nil {
			return nil, err
		}
		return []string{path}, nil
	}
	idx := Index{Metadata: map[string]any{"total_size": total}, WeightMap: map[string]string{}}
	var written []string
	for i, shard := range shards {
		name := ShardName(i, len(shards))
		path := filepath.Join(dir, name)
		if err := WriteFile(path, shard, DefaultMetadata()); err != nil {
			return nil, err
		}
		for _, t := range shard {
			idx.WeightMap[t.Name] = name
		}
		written = append(written, path)
	}
	data, err := json.MarshalIndent(idx, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("write %s: %w", IndexFile, err)
	}
	path := filepath.Join(dir, IndexFile)
	if err := renameio.Write(path, func(w io.Writer) error {
		_, err := w.Write(append(data, '\n'))
		return err
	}); err != nil {
		return nil, err
	}
	return append(written, path), nil
}

// removeWeights deletes model.safetensors, the index and model-*-of-*.safetensors.
func removeWeights(dir string) error {
	old, err := filepath.Glob(filepath.Join(dir, "model-*-of-*.safetensors"))
	if err != nil {
		return fmt.Errorf("write checkpoint %s: %w", dir, err)
	}
	old = append(old, filepath.Join(dir, SingleFile), filepath.Join(dir, IndexFile))
	for _, p := range old {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("write checkpoint %s: remove stale %s: %w", dir, p, err)
		}
	}
	return nil
}
