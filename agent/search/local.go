package search

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"sync"

	"github.com/blevesearch/bleve/v2"
)

// LocalConfig configures a Local retriever.
type LocalConfig struct {
	// Workers is how many queries of one batch are searched at once; 0 means GOMAXPROCS.
	Workers int `json:"workers"`
}

// Local is a Retriever over a committed index (stages/index). It opens the index
// read-only — bleve writes nothing into it, so the files keep the sha256 sums its
// commit record lists — and any number of processes may serve the same directory. A
// Local is safe for concurrent use; Close it when done.
type Local struct {
	dir     string
	idx     bleve.Index
	meta    Meta
	workers int
}

var _ Retriever = (*Local)(nil)

// OpenLocal opens the index in dir. A directory that is not a committed index (no
// commit record of stage Stage, a MetaFile it does not list, another format; see
// ReadMeta) or whose bleve files hold another document count is an error wrapping
// ErrNotIndex.
func OpenLocal(dir string, cfg LocalConfig) (*Local, error) {
	m, err := ReadMeta(dir)
	if err != nil {
		return nil, err
	}
	idx, err := bleve.OpenUsing(filepath.Join(dir, bleveSubdir), map[string]any{"read_only": true})
	if err != nil {
		return nil, fmt.Errorf("index %s: open: %w; rebuild with `mempo index --force`: %w", dir, err, ErrNotIndex)
	}
	n, err := idx.DocCount()
	if err == nil && int64(n) != m.Docs {
		err = fmt.Errorf("holds %d documents, %s says %d; rebuild with `mempo index --force`: %w", n, MetaFile, m.Docs, ErrNotIndex)
	}
	if err != nil {
		idx.Close()
		return nil, fmt.Errorf("index %s: %w", dir, err)
	}
	w := cfg.Workers
	if w <= 0 {
		w = runtime.GOMAXPROCS(0)
	}
	return &Local{dir: dir, idx: idx, meta: m, workers: w}, nil
}

// Meta returns the index's description, with its Key.
func (l *Local) Meta() Meta { return l.meta }

// Close releases the index.
func (l *Local) Close() error {
	if err := l.idx.Close(); err != nil {
		return fmt.Errorf("index %s: close: %w", l.dir, err)
	}
	return nil
}

// Retrieve searches each query with BM25 over the passages' contents and returns up
// to topk hits per query, by descending score, ties by ascending id. Queries run
// concurrently on up to Workers goroutines; each one's result is independent of the
// others, so batching never changes an answer.
func (l *Local) Retrieve(ctx context.Context, queries []string, topk int) ([][]Hit, error) {
	if topk < 1 {
		return nil, fmt.Errorf("index %s: topk %d, want at least 1: %w", l.dir, topk, ErrBadRequest)
	}
	out := make([][]Hit, len(queries))
	if len(queries) == 0 {
		return out, nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
	)
	next := make(chan int)
	workers := min(l.workers, len(queries))
	for range workers {
		wg.Go(func() {
			for i := range next {
				hits, err := l.search(ctx, queries[i], topk)
				if err != nil {
					once.Do(func() {
						first = fmt.Errorf("index %s: query %d %q: %w", l.dir, i, queries[i], err)
						cancel()
					})
					continue
				}
				out[i] = hits
			}
		})
	}
feed:
	for i := range queries {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if first != nil {
		return nil, first
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("index %s: %w", l.dir, err)
	}
	return out, nil
}

// search runs one query. The match query analyzes text with the field's analyzer
// and ORs its terms, as a BM25 bag-of-words query does.
func (l *Local) search(ctx context.Context, text string, topk int) ([]Hit, error) {
	q := bleve.NewMatchQuery(text)
	q.SetField(fieldName)
	req := bleve.NewSearchRequestOptions(q, topk, 0, false)
	req.SortBy([]string{"-_score", "_id"})
	req.Fields = []string{fieldName}
	res, err := l.idx.SearchInContext(ctx, req)
	if err != nil {
		return nil, err
	}
	hits := make([]Hit, 0, len(res.Hits))
	for _, dm := range res.Hits {
		contents, ok := dm.Fields[fieldName].(string)
		if !ok {
			return nil, fmt.Errorf("document %q has no stored %s; rebuild with `mempo index --force`: %w", dm.ID, fieldName, ErrNotIndex)
		}
		title, text := SplitContents(contents)
		hits = append(hits, Hit{ID: dm.ID, Title: title, Text: text, Contents: contents, Score: dm.Score})
	}
	return hits, nil
}
