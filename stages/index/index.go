// Package index is the step that builds a BM25 search index (mempo index) from a
// Search-R1 JSONL corpus, for the agent's search tool (agent/search).
//
// It commits like every step that writes a directory (jobs.Begin, Artifact.Publish):
// the cache key names the index format, analyzer and scoring as its config and the
// corpus by the sha256 of its bytes, never by its path; the index is built in the
// key's temp dir beside the output, under the output's lock, and published with
// checkpoint.json (format.Commit, stage "index"), which lists every file by sha256.
// An index directory holds:
//
//	bleve/            the bleve index (one merged scorch segment and its root.bolt)
//	mempo_index.json  what the index holds (search.Meta): analysis, corpus sha256 and
//	                  bytes, passage count; no times or paths
//	checkpoint.json   the commit record, written last
//
// A rerun on the same corpus bytes is a cache hit that does nothing, wherever the
// corpus now lies; a failed or interrupted build leaves the previous index as it was.
// The key holds the index format, not the binary's code version, so a new binary
// keeps the index. bleve's files are not byte-reproducible (search.Write), so a
// rebuild (--force, a new corpus or format) gets a new record digest, and what is
// keyed on the index is recomputed.
// What an index is — analysis, mapping, how it is read and searched — is agent/search's.
package index

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/mempo/mempo/agent/search"
	"github.com/mempo/mempo/format"
	"github.com/mempo/mempo/jobs"
)

// Stage names the index step in keys and commit records.
const Stage = search.Stage

// ErrInput marks unusable inputs: no corpus, no output, an output that is no index.
var ErrInput = errors.New("invalid index input")

// Config is the resolved configuration of the index step.
type Config struct {
	// Corpus is the Search-R1 JSONL corpus to index (".gz" is read compressed). It is
	// keyed by the sha256 of its bytes; its path is recorded, not keyed.
	Corpus string `json:"corpus"`
}

// Result says what Run did.
type Result struct {
	Dir    string
	Hit    bool // Out already held the index of this corpus
	Key    jobs.Key
	Commit *format.Commit // the index's commit record
	Meta   search.Meta    // what the index holds
	// BuildS is the wall time of the build, 0 on a hit. It is logged, never recorded in
	// the index, whose files are the same bytes for the same corpus.
	BuildS float64
}

// Run makes spec.Out hold the index of cfg.Corpus. Of spec it uses Out, Force, Log,
// KeyDebug, the progress fields (Progress, ProgressOut, ProgressEvery: corpus bytes
// read and passages indexed) and what jobs.Begin uses (Now, Host, Trace). A cache hit
// returns the committed record and does no work; anything else builds the index in
// the temp dir of jobs.Begin and publishes it, so Out is never a partial index. A
// failed build removes its temp dir: a bleve build cannot be resumed.
func Run(ctx context.Context, cfg Config, spec jobs.Spec) (*Result, error) {
	spec = spec.WithDefaults()
	if spec.Out == "" {
		return nil, fmt.Errorf("index: no output directory (--out DIR): %w", ErrInput)
	}
	if cfg.Corpus == "" {
		return nil, fmt.Errorf("index: no corpus (--corpus FILE): %w", ErrInput)
	}
	corpus, err := jobs.FileInput("corpus", cfg.Corpus)
	if err != nil {
		return nil, fmt.Errorf("index: --corpus: %w", err)
	}
	key, err := runKey(corpus, spec.KeyDebug)
	if err != nil {
		return nil, err
	}
	if err := replaceable(spec.Out); err != nil {
		return nil, err
	}
	art, hit, err := jobs.Begin(spec, key)
	if err != nil {
		return nil, fmt.Errorf("index: %w", err)
	}
	if hit != nil {
		return cached(spec, key, hit)
	}
	defer art.Release()
	res, err := build(ctx, art, corpus, spec)
	if err != nil {
		os.RemoveAll(art.Tmp)
		return nil, fmt.Errorf("index %s: %w", spec.Out, jobs.DiskFull(err, ""))
	}
	return res, nil
}

// runKey keys the index as every committed directory is keyed (jobs.KeySpec): stage,
// the analysis as config, the corpus by digest. In place of the binary's code version
// it keys the index format (search.IndexFormat, bumped when the analysis or bleve's
// files change), as indexes always were: a large corpus takes hours to index, and a
// new mempo binary builds the same index.
func runKey(corpus format.Input, debug io.Writer) (jobs.Key, error) {
	a := search.CurrentAnalysis()
	conf, err := jobs.CanonicalJSON(a)
	if err != nil {
		return jobs.Key{}, fmt.Errorf("index: encode config: %w", err)
	}
	return jobs.KeySpec{Stage: Stage, Code: fmt.Sprintf("index format %d", a.Format), Schema: jobs.CheckpointSchema,
		Config: conf, Inputs: []format.Input{corpus}}.Key(debug), nil
}

// cached describes the index a cache hit found.
func cached(spec jobs.Spec, key jobs.Key, c *format.Commit) (*Result, error) {
	m, err := search.ReadMeta(spec.Out)
	if err != nil {
		return nil, fmt.Errorf("index: cache hit: %w", err)
	}
	spec.Log.Info("index is up to date (cache hit)", "dir", spec.Out, "key", key.Short(), "docs", m.Docs,
		"corpus_sha256", m.Corpus.SHA256)
	return &Result{Dir: spec.Out, Hit: true, Key: key, Commit: c, Meta: m}, nil
}

// replaceable refuses to build over a directory that is neither absent, empty, nor an
// index (one with search.MetaFile, even a damaged one or one written before indexes
// had a commit record): --out pointed at the wrong directory must not replace it.
func replaceable(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) || (err == nil && len(entries) == 0) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("index %s: %w", dir, err)
	}
	if _, err := os.Lstat(filepath.Join(dir, search.MetaFile)); err == nil {
		return nil
	}
	return fmt.Errorf("index %s: directory exists and is not an index (no %s); remove it or choose another --out: %w",
		dir, search.MetaFile, ErrInput)
}

// build writes the index into art.Tmp, which a killed earlier run may have left
// holding anything, checks that the corpus indexed is the one keyed, and publishes it.
func build(ctx context.Context, art *jobs.Artifact, corpus format.Input, spec jobs.Spec) (*Result, error) {
	if err := os.RemoveAll(art.Tmp); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(art.Tmp, 0o755); err != nil {
		return nil, err
	}
	start := spec.Now()
	m, err := write(ctx, corpus.Path, art.Tmp, spec)
	if err != nil {
		return nil, err
	}
	if want := jobs.DigestOf(corpus); m.Corpus.SHA256 != want {
		return nil, fmt.Errorf("corpus %s changed while it was being indexed (sha256 %s, then %s); rerun when it is stable",
			corpus.Path, want, m.Corpus.SHA256)
	}
	c, err := art.Publish(format.Commit{Stage: Stage, Inputs: []format.Input{corpus}})
	if err != nil {
		return nil, err
	}
	res := &Result{Dir: art.Out, Key: art.Key, Commit: c, Meta: m, BuildS: spec.Now().Sub(start).Seconds()}
	spec.Log.Info("index built", "dir", art.Out, "key", art.Key.Short(), "docs", m.Docs,
		"corpus_sha256", m.Corpus.SHA256, "build_s", res.BuildS)
	return res, nil
}

// write runs search.Write with progress over the corpus file's bytes.
func write(ctx context.Context, corpus, dir string, spec jobs.Spec) (search.Meta, error) {
	var size int64
	if fi, err := os.Stat(corpus); err == nil {
		size = fi.Size()
	}
	p := jobs.NewReporter(spec.ProgressOut, spec.Progress, Stage, size, spec.Now, spec.ProgressEvery).Units("bytes", "passages")
	defer p.Finish()
	var docs, bytes int64
	return search.Write(ctx, corpus, dir, func(d, b int64) {
		p.Add(b-bytes, d-docs, 0)
		docs, bytes = d, b
	})
}
