// Command mempo-reference runs the tensor-free reference stage: it exercises the stage
// runtime (cache, resume, locks, scale-out) and is what the runtime's tests drive.
package main

import (
	"os"

	"github.com/urfave/cli/v2"

	"github.com/mempo/mempo/cmd/internal/app"
	"github.com/mempo/mempo/stages/reference"
)

var (
	rowsFlag   = &cli.IntFlag{Name: "rows", Category: "Stage", Value: 1000, Usage: "questions to generate when --input is not set"}
	shardsFlag = &cli.IntFlag{Name: "shards", Category: "Stage", Value: 8, Usage: "shard plan size: rows split into this many contiguous groups"}
	widthFlag  = &cli.IntFlag{Name: "width", Category: "Stage", Value: 64, Usage: "token ids per row"}
	inputFlag  = &cli.StringFlag{Name: "input", Category: "Stage", Usage: "JSONL `FILE` of {\"question\": ...} objects to use instead of generated questions"}
	batchFlag  = &cli.IntFlag{Name: "batch", Category: "Stage", Value: 64, Usage: "rows written between flushes and progress reports"}
)

func main() {
	flags := append(app.StageFlags(), app.Clone(rowsFlag, shardsFlag, widthFlag, inputFlag, batchFlag)...)
	os.Exit(app.Main(app.New("mempo-reference", "run the tensor-free reference stage", flags, run), os.Args))
}

func run(c *cli.Context) error {
	spec, err := app.StageSpec(c)
	if err != nil {
		return err
	}
	cfg := reference.Config{Rows: c.Int("rows"), Shards: c.Int("shards"), Width: c.Int("width"),
		Input: c.String("input"), Batch: c.Int("batch")}
	_, err = reference.Run(c.Context, cfg, spec)
	return err
}
