package audit

import (
	"cmp"
	"container/list"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/mempo/mempo/format"
	"github.com/mempo/mempo/model/bpe"
)

// shardCacheSize is how many decoded shards the store keeps: a question page reads one
// shard of each of its four kinds, and the compare view one per iteration.
const shardCacheSize = 24

// store opens what pages need, lazily, and caches it: datasets (their manifests and
// shard checks), each dataset's uid → shard index, decoded shards (LRU), whole score
// and prompt datasets, and tokenizers. A dataset is cached with its manifest's
// modification time and reopened when that changes (a stage rerun with --force
// replaces the directory). Everything is read-only.
type store struct {
	root string

	mu         sync.Mutex
	datasets   map[string]*dataset // by absolute directory
	shards     map[string]*list.Element
	lru        *list.List // of *shardEntry, most recent first
	tokenizers map[string]*bpe.Tokenizer
	scan       *Overview
	scanAt     time.Time
}

type dataset struct {
	d     *format.Dataset
	mtime time.Time

	once  sync.Once
	index map[string][]int // uid → shards holding it
	err   error

	rowsOnce sync.Once
	rows     any // the whole dataset, for small kinds (scores, prompts)
	rowsErr  error
}

type shardEntry struct {
	key  string
	once sync.Once
	rows any
	err  error
}

func newStore(root string) *store {
	return &store{
		root:       root,
		datasets:   map[string]*dataset{},
		shards:     map[string]*list.Element{},
		lru:        list.New(),
		tokenizers: map[string]*bpe.Tokenizer{},
	}
}

// overview returns the run's scan, redone at most every two seconds so a run in
// progress shows its new datasets.
func (s *store) overview() (*Overview, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.scan != nil && time.Since(s.scanAt) < 2*time.Second {
		return s.scan, nil
	}
	o, err := Scan(s.root)
	if err != nil {
		return nil, err
	}
	s.scan, s.scanAt = o, time.Now()
	return o, nil
}

// group returns the group at the relative path rel.
func (s *store) group(rel string) (*Group, error) {
	o, err := s.overview()
	if err != nil {
		return nil, err
	}
	for i := range o.Groups {
		if o.Groups[i].Path == rel {
			return &o.Groups[i], nil
		}
	}
	return nil, fmt.Errorf("group %q: no rollouts dataset there: %w", rel, ErrNotFound)
}

// abs resolves a slash-separated path relative to the run, refusing one that leaves it.
func (s *store) abs(rel string) (string, error) {
	p := filepath.FromSlash(rel)
	if rel == "" || !filepath.IsLocal(p) {
		return "", fmt.Errorf("path %q: want a path inside the run: %w", rel, ErrNotFound)
	}
	return filepath.Join(s.root, p), nil
}

// open returns the committed dataset at the run-relative path rel.
func (s *store) open(rel string) (*dataset, error) {
	dir, err := s.abs(rel)
	if err != nil {
		return nil, err
	}
	return s.openDir(dir)
}

func (s *store) openDir(dir string) (*dataset, error) {
	st, err := os.Stat(filepath.Join(dir, format.ManifestName))
	s.mu.Lock()
	ds := s.datasets[dir]
	s.mu.Unlock()
	if err == nil && ds != nil && ds.mtime.Equal(st.ModTime()) {
		// Committed shards never change, but a damaged run is told, not served from
		// the cache: a stat per shard.
		if err := checkShards(ds.d); err != nil {
			return nil, err
		}
		return ds, nil
	}
	d, err := openChecked(dir)
	if err != nil {
		return nil, err
	}
	ds = &dataset{d: d}
	if st != nil {
		ds.mtime = st.ModTime()
	}
	s.mu.Lock()
	s.datasets[dir] = ds
	s.mu.Unlock()
	return ds, nil
}

// uidIndex maps each uid to the shards holding its rows, reading only the uid column
// of each shard.
func (ds *dataset) uidIndex() (map[string][]int, error) {
	ds.once.Do(func() {
		ds.index = map[string][]int{}
		for i := range ds.d.Len() {
			uids, err := readUIDs(ds.d.Path(i))
			if err != nil {
				ds.err = err
				return
			}
			for _, u := range uids {
				ds.index[u] = append(ds.index[u], i)
			}
		}
	})
	return ds.index, ds.err
}

// readUIDs returns the distinct values of the uid column of one shard, in order. The
// file is untrusted: a panic while decoding it is an error naming it.
func readUIDs(path string) (uids []string, err error) {
	defer func() {
		if p := recover(); p != nil {
			uids, err = nil, fmt.Errorf("read %s: column uid: %v: %w", path, p, format.ErrCorrupt)
		}
	}()
	pf, err := file.OpenParquetFile(path, false)
	if err != nil {
		return nil, fmt.Errorf("read %s: truncated or not Parquet (%w): %w", path, err, format.ErrCorrupt)
	}
	defer pf.Close()
	col := pf.MetaData().Schema.ColumnIndexByName("uid")
	if col < 0 {
		return nil, fmt.Errorf("read %s: no column uid: %w", path, format.ErrSchemaMismatch)
	}
	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{}, memory.DefaultAllocator)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w: %w", path, err, format.ErrCorrupt)
	}
	cr, err := fr.GetColumn(context.Background(), col)
	if err != nil {
		return nil, fmt.Errorf("read %s: column uid: %w: %w", path, err, format.ErrCorrupt)
	}
	defer cr.Release()
	ch, err := cr.NextBatch(pf.NumRows())
	if err != nil {
		return nil, fmt.Errorf("read %s: column uid: %w: %w", path, err, format.ErrCorrupt)
	}
	defer ch.Release()
	for _, a := range ch.Chunks() {
		v, ok := a.(interface{ Value(int) string })
		if !ok {
			return nil, fmt.Errorf("read %s: column uid: type %s, want string: %w", path, a.DataType(), format.ErrSchemaMismatch)
		}
		for i := range a.Len() {
			if u := v.Value(i); len(uids) == 0 || uids[len(uids)-1] != u {
				uids = append(uids, u)
			}
		}
	}
	return uids, nil
}

// shardRows returns the decoded rows of shard i of ds, from the cache when it holds them.
func shardRows[R format.Row](s *store, ds *dataset, i int) ([]R, error) {
	key := fmt.Sprintf("%s\x00%d\x00%d", ds.d.Dir, i, ds.mtime.UnixNano())
	s.mu.Lock()
	el, ok := s.shards[key]
	if ok {
		s.lru.MoveToFront(el)
	} else {
		el = s.lru.PushFront(&shardEntry{key: key})
		s.shards[key] = el
		for s.lru.Len() > shardCacheSize {
			old := s.lru.Back()
			s.lru.Remove(old)
			delete(s.shards, old.Value.(*shardEntry).key)
		}
	}
	e := el.Value.(*shardEntry)
	s.mu.Unlock()
	e.once.Do(func() {
		r, err := format.OpenShard[R](ds.d, i)
		if err != nil {
			e.err = err
			return
		}
		e.rows, e.err = format.ReadAll(r)
	})
	if e.err != nil {
		s.mu.Lock()
		if s.shards[key] == el {
			s.lru.Remove(el)
			delete(s.shards, key)
		}
		s.mu.Unlock()
		return nil, e.err
	}
	return e.rows.([]R), nil
}

// uidRows returns the rows of uid in the dataset at rel, sorted by sample then turn.
func uidRows[R format.Row](s *store, rel, uid string, key func(*R) (string, int32, int32)) ([]R, error) {
	ds, err := s.open(rel)
	if err != nil {
		return nil, err
	}
	idx, err := ds.uidIndex()
	if err != nil {
		return nil, err
	}
	var out []R
	for _, i := range idx[uid] {
		rows, err := shardRows[R](s, ds, i)
		if err != nil {
			return nil, err
		}
		for j := range rows {
			if u, _, _ := key(&rows[j]); u == uid {
				out = append(out, rows[j])
			}
		}
	}
	slices.SortStableFunc(out, func(a, b R) int {
		_, sa, ta := key(&a)
		_, sb, tb := key(&b)
		return cmp.Or(cmp.Compare(sa, sb), cmp.Compare(ta, tb))
	})
	return out, nil
}

// allRows returns every row of the dataset at the absolute directory dir, read once.
func allRows[R format.Row](s *store, dir string) ([]R, error) {
	ds, err := s.openDir(dir)
	if err != nil {
		return nil, err
	}
	ds.rowsOnce.Do(func() {
		r, err := format.OpenShards[R](ds.d)
		if err != nil {
			ds.rowsErr = err
			return
		}
		ds.rows, ds.rowsErr = format.ReadAll(r)
	})
	if ds.rowsErr != nil {
		return nil, ds.rowsErr
	}
	return ds.rows.([]R), nil
}

// resolveInput finds an input path recorded in a manifest or commit record: such paths
// are relative to wherever the pipeline ran, so the longest suffix of it that exists
// under the run is taken first, then the path as it is.
func (s *store) resolveInput(p string) (string, bool) {
	if p == "" {
		return "", false
	}
	if filepath.IsAbs(p) {
		return p, exists(p)
	}
	parts := strings.Split(filepath.ToSlash(filepath.Clean(p)), "/")
	for i := range parts {
		c := filepath.Join(s.root, filepath.Join(parts[i:]...))
		if exists(c) {
			return c, true
		}
	}
	return p, exists(p)
}

// input returns the resolved path of the manifest input called name of the dataset at rel.
func (s *store) input(rel, name string) (string, bool) {
	ds, err := s.open(rel)
	if err != nil {
		return "", false
	}
	for _, in := range ds.d.Manifest.Inputs {
		if in.Name == name {
			return s.resolveInput(in.Path)
		}
	}
	return "", false
}

// prompts returns the prompts the group's rollouts were generated from, by uid.
func (s *store) prompts(g *Group) (map[string]*format.Prompt, error) {
	dir, ok := s.input(g.Datasets[format.KindRollouts], "prompts")
	if !ok {
		return nil, fmt.Errorf("group %s: the rollouts manifest names no prompts dataset that exists: %w", g.Path, ErrNotFound)
	}
	rows, err := allRows[format.Prompt](s, dir)
	if err != nil {
		return nil, err
	}
	m := make(map[string]*format.Prompt, len(rows))
	for i := range rows {
		m[rows[i].UID] = &rows[i]
	}
	return m, nil
}

// tokenizer returns the tokenizer of the policy that generated the group's rollouts:
// the rollouts manifest's policy input, else the checkpoint beside the group, else any
// checkpoint of the run with a tokenizer. path is where it was read.
func (s *store) tokenizer(g *Group) (tok *bpe.Tokenizer, path string, err error) {
	var cands []string
	if dir, ok := s.input(g.Datasets[format.KindRollouts], "policy"); ok {
		cands = append(cands, filepath.Join(dir, format.TokenizerFile))
	}
	if g.Policy != "" {
		if dir, err := s.abs(g.Policy); err == nil {
			cands = append(cands, filepath.Join(dir, format.TokenizerFile))
		}
	}
	if o, err := s.overview(); err == nil {
		for _, c := range o.Checkpoints {
			if dir, err := s.abs(c.Path); err == nil {
				cands = append(cands, filepath.Join(dir, format.TokenizerFile))
			}
		}
	}
	for _, p := range cands {
		if !exists(p) {
			continue
		}
		s.mu.Lock()
		tok = s.tokenizers[p]
		s.mu.Unlock()
		if tok != nil {
			return tok, p, nil
		}
		tok, err = bpe.Load(p)
		if err != nil {
			return nil, p, err
		}
		s.mu.Lock()
		s.tokenizers[p] = tok
		s.mu.Unlock()
		return tok, p, nil
	}
	return nil, "", errors.New("no tokenizer.json in the policy checkpoint or anywhere in the run")
}
