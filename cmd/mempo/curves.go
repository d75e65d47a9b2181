package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/mempo/mempo/cmd/internal/app"
	"github.com/mempo/mempo/stages/eval"
)

var curvesRunFlag = &cli.StringSliceFlag{Name: "run", Category: "Inputs", Required: true,
	Usage: "`NAME=DIR`: a run variant's directory holding iter-1, iter-2, …; repeat to compare"}

var curvesCommand = &cli.Command{
	Name:  "curves",
	Usage: "plot mean reward and KL to the reference over RL iterations",
	Description: `Reads each iteration's scores dataset (mean outcome reward) and its updated policy's
trainer_state.json (mean KL) and writes reward_vs_iter.png and kl_vs_iter.png to --out.`,
	Flags:  append(app.Clone(app.OutFlag), app.Clone(curvesRunFlag)...),
	Action: runCurves,
}

func runCurves(c *cli.Context) error {
	out := c.String(app.OutFlag.Name)
	if out == "" {
		return app.Usage(fmt.Errorf("--out is required"))
	}
	var reward, kl []eval.Series
	for _, spec := range c.StringSlice(curvesRunFlag.Name) {
		name, dir, ok := strings.Cut(spec, "=")
		if !ok || name == "" || dir == "" {
			return app.Usage(fmt.Errorf("--run %q: want NAME=DIR", spec))
		}
		cur, err := eval.RunCurves(dir)
		if err != nil {
			return err
		}
		reward = append(reward, eval.Series{Label: name, Points: cur.Reward})
		kl = append(kl, eval.Series{Label: name, Points: cur.KL})
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	if err := eval.PlotPNG(filepath.Join(out, "reward_vs_iter.png"), "Mean reward per RL iteration", "iteration", "reward", reward); err != nil {
		return err
	}
	if err := eval.PlotPNG(filepath.Join(out, "kl_vs_iter.png"), "KL to the reference per RL iteration", "iteration", "KL", kl); err != nil {
		return err
	}
	fmt.Fprintf(c.App.Writer, "wrote %s/reward_vs_iter.png, kl_vs_iter.png\n", out)
	return nil
}
