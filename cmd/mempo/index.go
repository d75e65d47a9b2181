package main

import (
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/urfave/cli/v2"
	"golang.org/x/term"

	"github.com/mempo/mempo/agent/search"
)

var (
	indexCorpusFlag = &cli.StringFlag{
		Name:      "corpus",
		Usage:     `Search-R1 JSONL corpus to index, one {"id": "…", "contents": "\"Title\"\ntext"} per line (".gz" is read compressed)`,
		EnvVars:   []string{"MEMPO_CORPUS"},
		Category:  "Index",
		Required:  true,
		TakesFile: true,
	}
	indexOutFlag = &cli.StringFlag{
		Name:      "out",
		Usage:     "index directory to create; replaced only once the new index is complete",
		EnvVars:   []string{"MEMPO_OUT"},
		Category:  "Index",
		Required:  true,
		TakesFile: true,
	}
	indexForceFlag = &cli.BoolFlag{
		Name:     "force",
		Usage:    "rebuild even when --out already holds an index of the same corpus",
		EnvVars:  []string{"MEMPO_FORCE"},
		Category: "Index",
	}
)

var indexCommand = &cli.Command{
	Name:  "index",
	Usage: "build a BM25 search index from a Search-R1 JSONL corpus",
	Description: `Indexes every passage's contents (title line and text) with bleve's BM25
scoring and a lower-casing, stop-word-removing, non-stemming analyzer, so exact
entity names match. The index is written beside --out and renamed into place when
complete; a rerun on the same corpus bytes is a cache hit and does nothing.
Serve it with 'mempo serve-retriever --index DIR' or pass DIR to mempo-rollout.`,
	Flags:  []cli.Flag{indexCorpusFlag, indexOutFlag, indexForceFlag},
	Action: runIndex,
}

func runIndex(c *cli.Context) error {
	ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg := search.IndexConfig{Corpus: c.String(indexCorpusFlag.Name), Dir: c.String(indexOutFlag.Name)}
	info, err := os.Stat(cfg.Corpus)
	if err != nil {
		return cli.Exit(fmt.Sprintf("--corpus: %v", err), 2)
	}
	opts := search.BuildOptions{
		Force:    c.Bool(indexForceFlag.Name),
		Log:      slog.Default(),
		Progress: indexProgress(info.Size()),
	}
	m, cached, err := search.Build(ctx, cfg, opts)
	if err != nil {
		return err
	}
	if cached {
		fmt.Fprintf(c.App.Writer, "index %s: up to date (%d passages, corpus sha256 %s)\n", cfg.Dir, m.Docs, m.Corpus.SHA256)
		return nil
	}
	fmt.Fprintf(c.App.Writer, "index %s: %d passages from %s (sha256 %s) in %.1fs\n",
		cfg.Dir, m.Docs, cfg.Corpus, m.Corpus.SHA256, m.BuildS)
	return nil
}

// indexProgress reports corpus bytes read: a progress bar on a terminal, a log
// line every 30 s otherwise (DESIGN.md §4).
func indexProgress(size int64) func(docs, bytes int64) {
	if term.IsTerminal(int(os.Stderr.Fd())) {
		bar := progressbar.DefaultBytes(size, "indexing")
		return func(_, bytes int64) {
			bar.Set64(bytes)
			if bytes >= size {
				bar.Finish()
			}
		}
	}
	last := time.Now()
	return func(docs, bytes int64) {
		if time.Since(last) < 30*time.Second {
			return
		}
		last = time.Now()
		slog.Info("indexing", "passages", docs, "bytes", bytes, "of", size)
	}
}
