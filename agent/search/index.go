package search

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/blevesearch/bleve/v2"
	"github.com/blevesearch/bleve/v2/analysis/analyzer/custom"
	"github.com/blevesearch/bleve/v2/analysis/lang/en"
	"github.com/blevesearch/bleve/v2/analysis/token/lowercase"
	"github.com/blevesearch/bleve/v2/analysis/tokenizer/unicode"
	"github.com/blevesearch/bleve/v2/mapping"
	index "github.com/blevesearch/bleve_index_api"
	"github.com/mempo/mempo/internal/renameio"
)

// IndexFormat versions the index layout and its analysis. Changing the analyzer,
// the mapping or the meta file bumps it, which turns every earlier index into a
// cache miss that is rebuilt.
const IndexFormat = 1

// MetaFile is an index's commit record, written last: its presence commits the index.
const MetaFile = "mempo_index.json"

const (
	bleveSubdir  = "bleve"
	analyzerName = "mempo_bm25"
	fieldName    = "contents"
)

// analyzerChain is the analysis applied to documents and queries alike: Unicode
// word segmentation (UAX #29), English possessive removal ("Varnak's" -> "varnak"),
// lower-casing, English stop words. There is deliberately no stemmer: answers and
// the queries that find them hinge on exact entity names ("Dunes" must not match
// "Dune", "Marches" must not match "March"), and a stemmer conflates exactly those
// while buying little on short factual passages. Stop words go because bleve's
// disjunction scores are multiplied by the fraction of query terms matched, so
// "the"/"of" would otherwise reward passages for matching function words.
var analyzerChain = []string{en.PossessiveName, lowercase.Name, en.StopName}

// analyzerSpec describes analyzerChain; it is recorded in the meta file and the key.
var analyzerSpec = unicode.Name + "+" + strings.Join(analyzerChain, "+")

// IndexConfig is the configuration of the index stage (`mempo index`).
type IndexConfig struct {
	// Corpus is the Search-R1 JSONL corpus to index (".gz" is decompressed).
	Corpus string `json:"corpus"`
	// Dir is the index directory to create or replace.
	Dir string `json:"dir"`
}

// BuildOptions are the knobs of one Build call that do not change its output.
type BuildOptions struct {
	// Force rebuilds even when Dir holds an index of the same corpus.
	Force bool
	// Log receives cache decisions and post-commit warnings; nil discards them.
	Log *slog.Logger
	// Progress, when set, is called every few thousand documents and at the end
	// with the documents indexed and the corpus file bytes read so far.
	Progress func(docs, bytes int64)
}

// Meta is the index's commit record, stored as mempo_index.json in its directory.
type Meta struct {
	Format   int        `json:"format"`
	Key      string     `json:"key"` // hex sha256 of what determines the index; equal keys, equal indexes
	Analyzer string     `json:"analyzer"`
	Scoring  string     `json:"scoring"`
	Corpus   CorpusInfo `json:"corpus"`
	Docs     int64      `json:"docs"`
	BuildS   float64    `json:"build_s"`
	Created  time.Time  `json:"created"`
}

// CorpusInfo identifies the corpus an index was built from.
type CorpusInfo struct {
	Path   string `json:"path"`
	SHA256 string `json:"sha256"`
	Bytes  int64  `json:"bytes"`
}

// indexKey hashes what determines the index contents, in labeled lines (cmd/go's
// cache key style). The corpus path is left out: moving a corpus is not a change.
func indexKey(corpusSHA256 string) string {
	h := sha256.New()
	fmt.Fprintf(h, "stage index\nformat %d\nanalyzer %s\nscoring %s\ncorpus %s\n",
		IndexFormat, analyzerSpec, index.BM25Scoring, corpusSHA256)
	return hex.EncodeToString(h.Sum(nil))
}

// ReadMeta reads and checks the commit record of the index in dir. A missing,
// unreadable or foreign record wraps ErrNotIndex and says how to build one.
func ReadMeta(dir string) (Meta, error) {
	path := filepath.Join(dir, MetaFile)
	b, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return Meta{}, fmt.Errorf("index %s: no %s (build one with `mempo index --corpus FILE --out %s`): %w",
				dir, MetaFile, dir, ErrNotIndex)
		}
		return Meta{}, fmt.Errorf("index %s: %w", dir, err)
	}
	var m Meta
	if err := json.Unmarshal(b, &m); err != nil {
		return Meta{}, fmt.Errorf("index %s: %s: %w; rebuild with `mempo index --force`: %w", dir, MetaFile, err, ErrNotIndex)
	}
	if m.Format != IndexFormat {
		return Meta{}, fmt.Errorf("index %s: format %d, want %d; rebuild with `mempo index --force`: %w",
			dir, m.Format, IndexFormat, ErrNotIndex)
	}
	if m.Key != indexKey(m.Corpus.SHA256) || m.Docs <= 0 {
		return Meta{}, fmt.Errorf("index %s: %s is inconsistent (key or document count); rebuild with `mempo index --force`: %w",
			dir, MetaFile, ErrNotIndex)
	}
	return m, nil
}

// Build indexes cfg.Corpus into cfg.Dir with BM25 scoring. The index is written to
// a scratch directory beside cfg.Dir and renamed into place only when complete, so
// cfg.Dir never holds a partial index: after a failed or killed build it holds the
// previous index or nothing. When cfg.Dir already holds an index of the same corpus
// bytes and format, Build returns its Meta with cached = true and does no work.
func Build(ctx context.Context, cfg IndexConfig, opts BuildOptions) (m Meta, cached bool, err error) {
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.Corpus == "" {
		return Meta{}, false, errors.New("index: no corpus given (--corpus FILE)")
	}
	if cfg.Dir == "" {
		return Meta{}, false, errors.New("index: no output directory given (--out DIR)")
	}
	dir := filepath.Clean(cfg.Dir)

	wantSHA := ""
	if !opts.Force {
		prev, err := ReadMeta(dir)
		switch {
		case err == nil:
			sha, size, err := digestFile(cfg.Corpus)
			if err != nil {
				return Meta{}, false, err
			}
			if prev.Key == indexKey(sha) {
				log.Info("index is up to date (cache hit)", "dir", dir, "corpus_sha256", sha, "docs", prev.Docs)
				return prev, true, nil
			}
			wantSHA = sha
			log.Info("index is stale (cache miss): corpus or format changed; rebuilding", "dir", dir,
				"corpus_sha256", sha, "bytes", size, "indexed_sha256", prev.Corpus.SHA256)
		default:
			if _, serr := os.Stat(dir); serr == nil {
				log.Info("no usable index (cache miss); rebuilding", "dir", dir, "reason", err)
			}
		}
	}

	if err := replaceable(dir); err != nil {
		return Meta{}, false, err
	}
	removeStale(dir, log)
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return Meta{}, false, fmt.Errorf("index %s: %w", dir, err)
	}
	tmp := dir + tmpInfix + strconv.Itoa(os.Getpid())
	if err := os.RemoveAll(tmp); err != nil {
		return Meta{}, false, fmt.Errorf("index %s: clear scratch %s: %w", dir, tmp, err)
	}
	if err := os.Mkdir(tmp, 0o755); err != nil {
		return Meta{}, false, fmt.Errorf("index %s: %w", dir, err)
	}
	published := false
	defer func() {
		if !published {
			os.RemoveAll(tmp)
		}
	}()

	start := time.Now()
	docs, info, err := writeIndex(ctx, cfg.Corpus, filepath.Join(tmp, bleveSubdir), tmp, opts.Progress)
	if err != nil {
		return Meta{}, false, fmt.Errorf("index %s: %w", dir, err)
	}
	if wantSHA != "" && info.SHA256 != wantSHA {
		return Meta{}, false, fmt.Errorf("index %s: corpus %s changed while it was being indexed (sha256 %s, then %s); rerun when it is stable",
			dir, cfg.Corpus, wantSHA, info.SHA256)
	}
	m = Meta{
		Format:   IndexFormat,
		Key:      indexKey(info.SHA256),
		Analyzer: analyzerSpec,
		Scoring:  index.BM25Scoring,
		Corpus:   info,
		Docs:     docs,
		BuildS:   time.Since(start).Seconds(),
		Created:  time.Now().UTC(),
	}
	if err := syncTree(tmp); err != nil {
		return Meta{}, false, fmt.Errorf("index %s: %w", dir, err)
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return Meta{}, false, fmt.Errorf("index %s: %w", dir, err)
	}
	if err := renameio.WriteFile(filepath.Join(tmp, MetaFile), append(b, '\n')); err != nil {
		return Meta{}, false, fmt.Errorf("index %s: %w", dir, err)
	}
	if err := renameio.Sync(tmp); err != nil {
		return Meta{}, false, fmt.Errorf("index %s: %w", dir, err)
	}
	if err := publish(tmp, dir, log); err != nil {
		return Meta{}, false, fmt.Errorf("index %s: %w", dir, err)
	}
	published = true
	log.Info("index built", "dir", dir, "docs", docs, "corpus_sha256", info.SHA256, "build_s", m.BuildS)
	return m, false, nil
}

// replaceable refuses to build over a directory that is neither absent, empty,
// nor an index (one with a meta file, even a damaged one): --out pointed at the
// wrong directory must not delete it.
func replaceable(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) || (err == nil && len(entries) == 0) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("index %s: %w", dir, err)
	}
	if _, err := os.Lstat(filepath.Join(dir, MetaFile)); err == nil {
		return nil
	}
	return fmt.Errorf("index %s: directory exists and is not an index (no %s); remove it or choose another --out", dir, MetaFile)
}

// progressEvery is how many documents pass between Progress calls.
const progressEvery = 4096

// writeIndex streams the corpus into a bleve offline builder at path. The builder
// writes one merged segment with no background persistence, so the build is a
// plain function of the corpus; its own scratch files go under scratch, which is on
// the same filesystem as path (the builder renames its final segment into place).
func writeIndex(ctx context.Context, corpusPath, path, scratch string, progress func(docs, bytes int64)) (int64, CorpusInfo, error) {
	c, err := OpenCorpus(corpusPath)
	if err != nil {
		return 0, CorpusInfo{}, err
	}
	defer c.Close()
	im, err := indexMapping()
	if err != nil {
		return 0, CorpusInfo{}, err
	}
	b, err := bleve.NewBuilder(path, im, map[string]any{"buildPathPrefix": scratch})
	if err != nil {
		return 0, CorpusInfo{}, fmt.Errorf("bleve builder %s: %w", path, err)
	}
	var docs int64
	for {
		d, err := c.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return 0, CorpusInfo{}, err
		}
		if err := b.Index(d.ID, map[string]any{fieldName: d.Contents}); err != nil {
			return 0, CorpusInfo{}, fmt.Errorf("corpus %s: line %d: id %q: %w", corpusPath, c.Line(), d.ID, err)
		}
		docs++
		if docs%progressEvery == 0 {
			if err := ctx.Err(); err != nil {
				return 0, CorpusInfo{}, fmt.Errorf("corpus %s: stopped at line %d: %w", corpusPath, c.Line(), err)
			}
			if progress != nil {
				progress(docs, c.Size())
			}
		}
	}
	if docs == 0 {
		return 0, CorpusInfo{}, fmt.Errorf("corpus %s: no documents: %w", corpusPath, ErrCorpus)
	}
	if err := ctx.Err(); err != nil {
		return 0, CorpusInfo{}, err
	}
	if err := b.Close(); err != nil {
		return 0, CorpusInfo{}, fmt.Errorf("bleve builder %s: %w", path, err)
	}
	if progress != nil {
		progress(docs, c.Size())
	}
	return docs, CorpusInfo{Path: corpusPath, SHA256: c.Digest(), Bytes: c.Size()}, nil
}

// indexMapping indexes and stores one field, "contents" (title line and text, as
// pyserini indexes Search-R1 corpora), scored with BM25.
func indexMapping() (*mapping.IndexMappingImpl, error) {
	im := bleve.NewIndexMapping()
	im.ScoringModel = index.BM25Scoring
	err := im.AddCustomAnalyzer(analyzerName, map[string]any{
		"type":          custom.Name,
		"tokenizer":     unicode.Name,
		"token_filters": analyzerChain,
	})
	if err != nil {
		return nil, fmt.Errorf("define analyzer %s: %w", analyzerSpec, err)
	}
	fm := mapping.NewTextFieldMapping()
	fm.Analyzer = analyzerName
	fm.Store = true
	fm.Index = true
	fm.IncludeTermVectors = false // no phrase queries or highlighting
	fm.IncludeInAll = false
	fm.DocValues = false
	dm := mapping.NewDocumentStaticMapping()
	dm.AddFieldMappingsAt(fieldName, fm)
	im.DefaultMapping = dm
	im.DefaultAnalyzer = analyzerName
	im.DefaultField = fieldName
	im.IndexDynamic = false
	im.StoreDynamic = false
	im.DocValuesDynamic = false
	return im, nil
}

// digestFile returns the hex sha256 and size of a file.
func digestFile(path string) (string, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, fmt.Errorf("corpus %s: %w", path, err)
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, fmt.Errorf("corpus %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}
