package main

import (
	"fmt"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/mempo/mempo/cmd/internal/app"
	"github.com/mempo/mempo/stages/index"
)

// indexCmd is what 'mempo index' resolves its flags into.
type indexCmd struct{ cfg index.Config }

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
	return app.Bind(&ix.cfg, app.Unbound(indexOutFlag, app.ForceFlag, app.ProgressFlag, app.LogLevelFlag, app.DebugFlag, app.TBDirFlag, app.TBStepFlag), []app.Flag{
		app.String(&ix.cfg.Corpus, cli.StringFlag{Name: "corpus", Category: "Index", Required: true, TakesFile: true,
			Usage: `Search-R1 JSONL corpus to index, one {"id": "…", "contents": "\"Title\"\ntext"} per line (".gz" is read compressed)`}),
	})
}

// indexOutFlag is index's --out, an index directory rather than a dataset.
var indexOutFlag = &cli.StringFlag{Name: app.OutFlag.Name, Category: "Output", TakesFile: true,
	Usage: "index `DIR` to create (required); replaced only once the new index is complete"}

func (ix *indexCmd) run(c *cli.Context) error {
	if _, err := os.Stat(ix.cfg.Corpus); err != nil {
		return app.Usage(fmt.Errorf("--corpus: %w", err))
	}
	spec, err := app.StageSpec(c)
	if err != nil {
		return err
	}
	res, err := index.Run(c.Context, ix.cfg, spec)
	if err != nil {
		return err
	}
	if res.Hit {
		fmt.Fprintf(spec.Stdout, "index %s: up to date (%d passages, corpus sha256 %s)\n", res.Dir, res.Meta.Docs, res.Meta.Corpus.SHA256)
		return nil
	}
	fmt.Fprintf(spec.Stdout, "index %s: %d passages from %s (sha256 %s) in %.1fs\n",
		res.Dir, res.Meta.Docs, ix.cfg.Corpus, res.Meta.Corpus.SHA256, res.BuildS)
	return nil
}
