package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/mempo/mempo/cmd/internal/app"
	"github.com/mempo/mempo/stages/eval"
)

var curvesRunFlag = &cli.StringSliceFlag{Name: "run", Category: "Inputs", Required: true,
	Usage: "`NAME=DIR`: a run variant's directory holding iter-1, iter-2, …; repeat to compare, and repeat a NAME with one DIR per training seed"}

var curvesCommand = &cli.Command{
	Name:  "curves",
	Usage: "plot mean reward and KL to the reference over RL iterations",
	Description: `Reads each iteration's scores dataset (mean outcome reward) and its updated policy's
trainer_state.json (mean KL) and writes reward_vs_iter.png, kl_vs_iter.png and
curves.csv to --out.

A NAME given with one DIR is drawn as a plain line. A NAME repeated with several DIRs
(one per seed) is drawn as the mean over seeds per iteration with a shaded band from the
min to the max over seeds (the legend says how many seeds); an iteration counts the
seeds that reached it.

curves.csv: header name,metric,iter,seeds,mean,lo,hi; one row per (NAME, metric,
iteration), metric reward or kl, mean over the seeds that reached the iteration, lo and
hi their min and max (equal to mean for one seed).`,
	Flags:  append(app.Clone(app.OutFlag), app.Clone(curvesRunFlag)...),
	Action: runCurves,
}

func runCurves(c *cli.Context) error {
	out := c.String(app.OutFlag.Name)
	if out == "" {
		return app.Usage(fmt.Errorf("--out is required"))
	}
	var names []string
	dirs := map[string][]string{}
	for _, spec := range c.StringSlice(curvesRunFlag.Name) {
		name, dir, ok := strings.Cut(spec, "=")
		if !ok || name == "" || dir == "" {
			return app.Usage(fmt.Errorf("--run %q: want NAME=DIR", spec))
		}
		if slices.Contains(dirs[name], dir) {
			return app.Usage(fmt.Errorf("--run %q: %s given twice for %s", spec, dir, name))
		}
		if dirs[name] == nil {
			names = append(names, name)
		}
		dirs[name] = append(dirs[name], dir)
	}
	var curves []eval.SeedCurves
	for _, name := range names {
		sc, err := eval.ReadSeedCurves(name, dirs[name])
		if err != nil {
			return err
		}
		curves = append(curves, sc)
	}
	files, err := eval.WriteCurves(out, curves)
	if err != nil {
		return err
	}
	fmt.Fprintf(c.App.Writer, "wrote %s/%s\n", out, strings.Join(files, ", "))
	return nil
}
