package search

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/blevesearch/bleve/v2"
	"github.com/blevesearch/bleve/v2/analysis/analyzer/custom"
	"github.com/blevesearch/bleve/v2/analysis/lang/en"
	"github.com/blevesearch/bleve/v2/analysis/token/lowercase"
	"github.com/blevesearch/bleve/v2/analysis/tokenizer/unicode"
	"github.com/blevesearch/bleve/v2/mapping"
	index "github.com/blevesearch/bleve_index_api"

	"github.com/mempo/mempo/format"
	"github.com/mempo/mempo/internal/renameio"
)

// IndexFormat versions the layout of an index directory and its analysis: bleve's
// files and MetaFile. Changing the analyzer, the mapping or MetaFile bumps it; the
// index step keys it (stages/index), so every earlier index becomes a cache miss.
const IndexFormat = 2

// Stage names the step that builds an index (stages/index, `mempo index`) in the
// index's commit record: a directory is an index when its checkpoint.json
// (format.Commit) is of this stage.
const Stage = "index"

// MetaFile describes the index (Meta). It is an ordinary file of the committed index,
// listed with bleve's files in the commit record; the pipelines' make targets name it.
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

// analyzerSpec describes analyzerChain; it is recorded in MetaFile and keyed.
var analyzerSpec = unicode.Name + "+" + strings.Join(analyzerChain, "+")

// Analysis is what determines an index besides its corpus: the layout version, the
// analyzer and the scoring model. The index step keys it as its config.
type Analysis struct {
	Format   int    `json:"format"`
	Analyzer string `json:"analyzer"`
	Scoring  string `json:"scoring"`
}

// CurrentAnalysis is the analysis Write applies.
func CurrentAnalysis() Analysis {
	return Analysis{Format: IndexFormat, Analyzer: analyzerSpec, Scoring: index.BM25Scoring}
}

// Meta is MetaFile: the analysis, the corpus by sha256 and size, and the passage
// count. It holds nothing of the run that wrote it (no time, no path), so the same
// corpus bytes always give the same file; the corpus path is in the commit record's
// inputs.
type Meta struct {
	Analysis
	Corpus CorpusInfo `json:"corpus"`
	Docs   int64      `json:"docs"`
}

// CorpusInfo identifies the corpus an index was built from by content.
type CorpusInfo struct {
	SHA256 string `json:"sha256"`
	Bytes  int64  `json:"bytes"`
}

// ReadMeta reads the description of the committed index in dir and checks it against
// the index's commit record: checkpoint.json of stage Stage, listing MetaFile with the
// bytes read, of this IndexFormat. A directory without a record, with another stage's
// record or with a MetaFile that differs from it is an error wrapping ErrNotIndex that
// says how to build one.
func ReadMeta(dir string) (Meta, error) {
	c, err := readCommit(dir)
	if err != nil {
		return Meta{}, err
	}
	path := filepath.Join(dir, MetaFile)
	b, err := os.ReadFile(path)
	if err != nil {
		return Meta{}, fmt.Errorf("index %s: %w; rebuild with `mempo index --force`: %w", dir, err, ErrNotIndex)
	}
	sum := sha256.Sum256(b)
	if err := c.Match(dir, MetaFile, hex.EncodeToString(sum[:]), int64(len(b))); err != nil {
		return Meta{}, fmt.Errorf("index %s: %w: %w", dir, err, ErrNotIndex)
	}
	var m Meta
	if err := json.Unmarshal(b, &m); err != nil {
		return Meta{}, fmt.Errorf("index %s: %s: %w; rebuild with `mempo index --force`: %w", dir, MetaFile, err, ErrNotIndex)
	}
	if m.Format != IndexFormat {
		return Meta{}, fmt.Errorf("index %s: format %d, want %d; rebuild with `mempo index --force`: %w",
			dir, m.Format, IndexFormat, ErrNotIndex)
	}
	if m.Docs <= 0 {
		return Meta{}, fmt.Errorf("index %s: %s records %d documents; rebuild with `mempo index --force`: %w", dir, MetaFile, m.Docs, ErrNotIndex)
	}
	return m, nil
}

// readCommit reads dir's commit record and checks that it commits an index.
func readCommit(dir string) (*format.Commit, error) {
	if _, err := os.Lstat(filepath.Join(dir, format.CommitFile)); errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("index %s: no %s (build one with `mempo index --corpus FILE --out %s`): %w",
			dir, format.CommitFile, dir, ErrNotIndex)
	}
	c, err := format.ReadCommit(dir)
	if err != nil {
		return nil, fmt.Errorf("index %s: %w; rebuild with `mempo index --force`: %w", dir, err, ErrNotIndex)
	}
	if c.Stage != Stage {
		return nil, fmt.Errorf("index %s: %s commits a %s checkpoint, not an index (build one with `mempo index --corpus FILE --out DIR`): %w",
			dir, format.CommitFile, c.Stage, ErrNotIndex)
	}
	return c, nil
}

// Write indexes the corpus at corpusPath into dir, an existing directory that the
// caller commits (stages/index builds into a temp dir and publishes it): bleve's files
// under dir/bleve, then MetaFile. What the index holds, and MetaFile's bytes, are a
// function of the corpus bytes and IndexFormat; bleve's files are not byte for byte
// (writeIndex). progress, when set, is called every few thousand documents and at the
// end with the documents indexed and the corpus file bytes read so far. A failed Write
// leaves dir partly written.
func Write(ctx context.Context, corpusPath, dir string, progress func(docs, bytes int64)) (Meta, error) {
	docs, corpus, err := writeIndex(ctx, corpusPath, filepath.Join(dir, bleveSubdir), dir, progress)
	if err != nil {
		return Meta{}, err
	}
	m := Meta{Analysis: CurrentAnalysis(), Corpus: corpus, Docs: docs}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return Meta{}, fmt.Errorf("index %s: %w", dir, err)
	}
	if err := renameio.WriteFile(filepath.Join(dir, MetaFile), append(b, '\n')); err != nil {
		return Meta{}, fmt.Errorf("index %s: %w", dir, err)
	}
	return m, nil
}

// progressEvery is how many documents pass between Progress calls.
const progressEvery = 4096

// writeIndex streams the corpus into a bleve offline builder at path. The builder
// writes one merged segment with no background persistence, so the documents, terms
// and scores are a plain function of the corpus; the bytes are not, as the builder
// numbers each batch's documents in Go map order (hits do not depend on it: ties are
// ordered by id). Its own scratch files go under scratch, which is on the same
// filesystem as path (the builder renames its final segment into place).
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
	return docs, CorpusInfo{SHA256: c.Digest(), Bytes: c.Size()}, nil
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
