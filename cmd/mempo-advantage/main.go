// Command mempo-advantage turns scores and memory probabilities into MemPO's per-token
// advantages: the GRPO outcome advantage plus λ times the memory advantage on each
// <mem> span (DESIGN.md §7). Pure arithmetic over cached datasets, so re-running it with
// new flags re-scores cached rollouts without regenerating them.
package main

import (
	"os"

	"github.com/urfave/cli/v2"

	"github.com/mempo/mempo/cmd/internal/app"
	"github.com/mempo/mempo/stages/advantage"
)

var (
	rolloutsFlag = &cli.StringFlag{Name: "rollouts", Category: "Inputs", Required: true, Usage: "rollouts dataset `DIR` (response lengths and <mem> spans)"}
	scoresFlag   = &cli.StringFlag{Name: "scores", Category: "Inputs", Required: true, Usage: "scores dataset `DIR` of those rollouts (outcome rewards)"}
	logprobsFlag = &cli.StringFlag{Name: "logprobs", Category: "Inputs", Required: true, Usage: "logprobs dataset `DIR` of those rollouts (p_mem, p_full)"}
	noStdFlag    = &cli.BoolFlag{Name: "no-std-norm", Category: "Advantage", Usage: "outcome advantage R − mean without dividing by the group std (Dr.GRPO)"}
	baseFlag     = &cli.StringFlag{Name: "mem-baseline", Category: "Advantage", Value: "full", Usage: "memory reward baseline b in R^M = P_mem − b: full (b = P_full), const:<v>, or none"}
	poolFlag     = &cli.StringFlag{Name: "mem-pool", Category: "Advantage", Value: "question", Usage: "memory advantage normalisation pool: question (all trajectories × turns of a question) or turn (per turn index)"}
	coefFlag     = &cli.Float64Flag{Name: "mem-coef", Category: "Advantage", Value: 1, Usage: "λ, the weight of the memory advantage on <mem> tokens; 0 is plain GRPO"}
)

func main() {
	flags := append(app.StageFlags(), app.Clone(rolloutsFlag, scoresFlag, logprobsFlag, noStdFlag, baseFlag, poolFlag, coefFlag)...)
	os.Exit(app.Main(app.New("mempo-advantage", "compute MemPO's outcome + memory advantages per token", flags, run), os.Args))
}

func run(c *cli.Context) error {
	spec, err := app.StageSpec(c)
	if err != nil {
		return err
	}
	cfg := advantage.DefaultConfig()
	cfg.NoStdNorm, cfg.MemCoef = c.Bool(noStdFlag.Name), c.Float64(coefFlag.Name)
	if cfg.MemBaseline, err = advantage.ParseBaseline(c.String(baseFlag.Name)); err != nil {
		return app.Usage(err)
	}
	if cfg.MemPool, err = advantage.ParsePool(c.String(poolFlag.Name)); err != nil {
		return app.Usage(err)
	}
	if err := cfg.Validate(); err != nil {
		return app.Usage(err)
	}
	in := advantage.Inputs{Rollouts: c.String(rolloutsFlag.Name), Scores: c.String(scoresFlag.Name), Logprobs: c.String(logprobsFlag.Name)}
	_, err = advantage.Run(c.Context, cfg, in, spec)
	return err
}
