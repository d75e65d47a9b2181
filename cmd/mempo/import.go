package main

import (
	"github.com/urfave/cli/v2"

	"github.com/mempo/mempo/cmd/internal/app"
	"github.com/mempo/mempo/stages/ingest"
)

// importCmd is what 'mempo import' resolves its flags into. The ingest stage states
// no DefaultConfig, so its defaults are named here: questions kept as they are (K 1)
// and ingest.DefaultShardRows.
type importCmd struct{ cfg ingest.RunConfig }

func importCommand() *cli.Command {
	im := &importCmd{cfg: ingest.RunConfig{Config: ingest.Config{K: 1}, ShardRows: ingest.DefaultShardRows}}
	return app.Command(&cli.Command{
		Name:  "import",
		Usage: "import verl/Search-R1 Parquet or JSONL questions into a prompts dataset",
		Description: `Reads each --input file and writes the prompts dataset --out: one row per
(composed) prompt with uid, data_source, split, source_index, question and golds,
in input order. Parquet files follow verl's layout (data_source, prompt chat list,
reward_model.ground_truth, or Search-R1's ground_truth.target, extra_info); JSONL
files hold {"question", "golden_answers"|"answers"|"answer", optional
"data_source", "split"} per line. Each row keeps its own data_source; --data-source
names only rows without one, and --override-data-source relabels them all. The
import is a cached stage: a rerun with the same files (by path and sha256) and flags
is a cache hit; --force recomputes.`,
	}, im.flags(), im.run)
}

func (im *importCmd) flags() *app.Flags {
	cfg := &im.cfg
	return app.Bind(cfg, app.StageFlags(), []app.Flag{
		app.Strings(&cfg.Inputs, cli.StringSliceFlag{Name: "input", Category: "Import", TakesFile: true,
			Usage: "question `FILE` to import: verl/Search-R1 .parquet or .jsonl (.gz read compressed); " +
				"repeat for several files, which are read in the order given"}),
		app.Int(&cfg.K, cli.IntFlag{Name: "k", Category: "Import",
			Usage: "objectives per prompt: K consecutive questions of one data_source and split are joined by \"; \" " +
				"(MEM1's composition); leftover questions are dropped with a warning; 1 keeps questions as they are"}),
		app.String(&cfg.Split, cli.StringFlag{Name: "split", Category: "Import",
			Usage: "split of every question; empty takes extra_info.split (Parquet) or \"split\" (JSONL), else the file name"}),
		app.String(&cfg.DataSource, cli.StringFlag{Name: "data-source", Category: "Import",
			Usage: "data_source `NAME` of the questions whose file gives none (no data_source column or field, or an empty one); " +
				"a question's own data_source is kept (Search-R1's nq and hotpotqa rows stay apart); empty takes the file name"}),
		app.String(&cfg.OverrideDataSource, cli.StringFlag{Name: "override-data-source", Category: "Import",
			Usage: "data_source `NAME` of every question, replacing the file's own (e.g. to compose --k objectives across sources); wins over --data-source"}),
		app.Bool(&cfg.DropPrompt, cli.BoolFlag{Name: "drop-prompt", Category: "Import",
			Usage: "leave out each question's own chat prompt (a Parquet prompt column's system message and the user message wrapping the question in the source's instructions), " +
				"so rollouts wrap the question in the protocol's user template; kept by default (K = 1), where the source's prompt renders the first context"}),
		app.Int(&cfg.ShardRows, cli.IntFlag{Name: "shard-rows", Category: "Import",
			Usage: "most prompts per shard; the plan is the fewest shards that respects it"}),
	})
}

func (im *importCmd) run(c *cli.Context) error {
	spec, err := app.StageSpec(c)
	if err != nil {
		return err
	}
	_, err = ingest.Run(c.Context, im.cfg, spec)
	return err
}
