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
	"github.com/mempo/mempo/cmd/internal/app"
)

// indexCmd is what 'mempo index' resolves its flags into.
type indexCmd struct {
	cfg   search.IndexConfig
	force bool
}

func indexCommand() *cli.Command {
	ix := &indexCmd{}
	return app.Command(&cli.Command{
		Name:  "index",
		Usage: "build a BM25 search index from a Search-R1 JSONL corpus",
		Description: `Indexes every passage's contents (title line and text) with bleve's BM25
scoring and a lower-casing, stop-word-removing, non-stemming analyzer, so exact
entity names match. The index is written beside --out and renamed into place when
complete; a rerun on the same corpus bytes is a cache hit and does nothing.
Serve it with 'mempo serve-retriever --index DIR' or pass DIR to mempo-rollout.`,
	}, ix.flags(), ix.run)
}

func (ix *indexCmd) flags() *app.Flags {
	return app.Bind(nil, []app.Flag{
		app.String(&ix.cfg.Corpus, cli.StringFlag{Name: "corpus", Category: "Index", Required: true, TakesFile: true,
			Usage: `Search-R1 JSONL corpus to index, one {"id": "…", "contents": "\"Title\"\ntext"} per line (".gz" is read compressed)`}),
		app.String(&ix.cfg.Dir, cli.StringFlag{Name: "out", Category: "Index", Required: true, TakesFile: true,
			Usage: "index directory to create; replaced only once the new index is complete"}),
		app.Bool(&ix.force, cli.BoolFlag{Name: "force", Category: "Index",
			Usage: "rebuild even when --out already holds an index of the same corpus"}),
	})
}

func (ix *indexCmd) run(c *cli.Context) error {
	ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
	defer stop()
	info, err := os.Stat(ix.cfg.Corpus)
	if err != nil {
		return cli.Exit(fmt.Sprintf("--corpus: %v", err), 2)
	}
	opts := search.BuildOptions{Force: ix.force, Log: slog.Default(), Progress: indexProgress(info.Size())}
	m, cached, err := search.Build(ctx, ix.cfg, opts)
	if err != nil {
		return err
	}
	if cached {
		fmt.Fprintf(c.App.Writer, "index %s: up to date (%d passages, corpus sha256 %s)\n", ix.cfg.Dir, m.Docs, m.Corpus.SHA256)
		return nil
	}
	fmt.Fprintf(c.App.Writer, "index %s: %d passages from %s (sha256 %s) in %.1fs\n",
		ix.cfg.Dir, m.Docs, ix.cfg.Corpus, m.Corpus.SHA256, m.BuildS)
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
