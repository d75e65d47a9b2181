package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/mempo/mempo/cmd/internal/app"
	"github.com/mempo/mempo/stages/eval"
)

// curvesCmd is what 'mempo curves' resolves its flags into.
type curvesCmd struct {
	out  string
	runs []eval.VariantRun
}

func curvesCommand() *cli.Command {
	cv := &curvesCmd{}
	return app.Command(&cli.Command{
		Name:  "curves",
		Usage: "plot reward, KL, groups without outcome signal and invalid turns over RL iterations",
		Description: `Reads each iteration's scores dataset (mean outcome reward), its updated policy's
trainer_state.json (mean KL), its advantages manifest (the fraction of groups whose
rewards are all equal: no outcome signal) and its rollouts manifest (the fraction of
invalid turns), and writes reward_vs_iter.png, kl_vs_iter.png, zero_spread_vs_iter.png,
invalid_vs_iter.png and curves.csv to --out.

A NAME given with one DIR is drawn as a plain line. A NAME repeated with several DIRs
(one per seed) is drawn as the mean over seeds per iteration with a shaded band from the
min to the max over seeds (the legend says how many seeds); an iteration counts the
seeds that reached it.

curves.csv: header name,metric,iter,seeds,mean,lo,hi; one row per (NAME, metric,
iteration), metric reward, kl, zero_spread or invalid, mean over the seeds that reached the iteration, lo and
hi their min and max (equal to mean for one seed).`,
	}, cv.flags(), cv.run)
}

func (cv *curvesCmd) flags() *app.Flags {
	return app.Bind(nil, []app.Flag{
		app.String(&cv.out, *app.OutFlag),
		app.List(&cv.runs, cli.StringSliceFlag{Name: "run", Category: "Inputs", Required: true,
			Usage: "`NAME=DIR`: a run variant's directory holding iter-1, iter-2, …; repeat to compare, and repeat a NAME with one DIR per training seed"}, eval.ParseVariantRun),
	})
}

func (cv *curvesCmd) run(c *cli.Context) error {
	if cv.out == "" {
		return app.Usage(fmt.Errorf("--out is required"))
	}
	curves, err := eval.ReadVariants(cv.runs)
	if errors.Is(err, eval.ErrConfig) {
		return app.Usage(err)
	}
	if err != nil {
		return err
	}
	files, err := eval.WriteCurves(cv.out, curves)
	if err != nil {
		return err
	}
	fmt.Fprintf(c.App.Writer, "wrote %s/%s\n", cv.out, strings.Join(files, ", "))
	return nil
}
