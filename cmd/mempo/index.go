package main

import (
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/urfave/cli/v2"
	"golang.org/x/term"

	"github.com/mempo/mempo/cmd/internal/app"
	"github.com/mempo/mempo/jobs"
	"github.com/mempo/mempo/stages/index"
)

// indexCmd is what 'mempo index' resolves its flags into.
type indexCmd struct {
	cfg  index.Config
	spec jobs.Spec
}

func indexCommand() *cli.Command {
	ix := &indexCmd{}
	return app.Command(&cli.Command{
		Name:  "index",
		Usage: "build a BM25 search index from a Search-R1 JSONL corpus",
		Description: `Indexes every passage's contents (title line and text) with bleve's BM25
scoring and a lower-casing, stop-word-removing, non-stemming analyzer, so exact
entity names match. The index is built beside --out and renamed into place when
complete, with checkpoint.json recording every file's sha256 and the corpus by
digest; a rerun on the same corpus bytes is a cache hit and does nothing.
Serve it with 'mempo serve-retriever --index DIR' or pass DIR to mempo-rollout.`,
	}, ix.flags(), ix.run)
}

func (ix *indexCmd) flags() *app.Flags {
	return app.Bind(nil, []app.Flag{
		app.String(&ix.cfg.Corpus, cli.StringFlag{Name: "corpus", Category: "Index", Required: true, TakesFile: true,
			Usage: `Search-R1 JSONL corpus to index, one {"id": "…", "contents": "\"Title\"\ntext"} per line (".gz" is read compressed)`}),
		app.String(&ix.spec.Out, cli.StringFlag{Name: "out", Category: "Index", Required: true, TakesFile: true,
			Usage: "index directory to create; replaced only once the new index is complete"}),
		app.Bool(&ix.spec.Force, cli.BoolFlag{Name: "force", Category: "Index",
			Usage: "rebuild even when --out already holds an index of the same corpus"}),
	})
}

func (ix *indexCmd) run(c *cli.Context) error {
	if _, err := os.Stat(ix.cfg.Corpus); err != nil {
		return app.Usage(fmt.Errorf("--corpus: %w", err))
	}
	stderr := c.App.ErrWriter
	if stderr == nil {
		stderr = os.Stderr
	}
	ix.spec.Log = slog.New(slog.NewTextHandler(stderr, nil))
	// Corpus bytes read: a bar on a terminal, a line every 30 s otherwise (DESIGN.md §4).
	ix.spec.ProgressOut, ix.spec.Progress, ix.spec.ProgressEvery = stderr, jobs.ProgressPlain, 30*time.Second
	if f, ok := stderr.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		ix.spec.Progress = jobs.ProgressBar
	}
	res, err := index.Run(c.Context, ix.cfg, ix.spec)
	if err != nil {
		return err
	}
	if res.Hit {
		fmt.Fprintf(c.App.Writer, "index %s: up to date (%d passages, corpus sha256 %s)\n", res.Dir, res.Meta.Docs, res.Meta.Corpus.SHA256)
		return nil
	}
	fmt.Fprintf(c.App.Writer, "index %s: %d passages from %s (sha256 %s) in %.1fs\n",
		res.Dir, res.Meta.Docs, ix.cfg.Corpus, res.Meta.Corpus.SHA256, res.BuildS)
	return nil
}
