// Package advantage is the command line of mempo-advantage, which turns scores and memory
// probabilities into MemPO's per-token advantages: the GRPO outcome advantage plus λ times
// the memory advantage on each <mem> span (DESIGN.md §7). Pure arithmetic over cached
// datasets, so re-running it with new flags re-scores cached rollouts without
// regenerating them. Pure Go.
package advantage

import (
	"github.com/urfave/cli/v2"

	"github.com/mempo/mempo/cmd/internal/app"
	stage "github.com/mempo/mempo/stages/advantage"
)

// App is mempo-advantage's command line: the app its main runs, and the mempo executable
// when invoked under the name mempo-advantage.
func App() *cli.App {
	cmd := command{cfg: stage.DefaultConfig()}
	return app.New("mempo-advantage", "compute MemPO's outcome + memory advantages per token", cmd.flags(), cmd.run)
}

// command is what mempo-advantage's flags resolve into.
type command struct {
	cfg stage.Config
	in  stage.Inputs
}

func (cmd *command) flags() *app.Flags {
	cfg, in := &cmd.cfg, &cmd.in
	return app.Bind(cfg, app.StageFlags(), []app.Flag{
		app.String(&in.Rollouts, cli.StringFlag{Name: "rollouts", Category: "Inputs", Required: true, Usage: "rollouts dataset `DIR` (response lengths and <mem> spans)"}),
		app.String(&in.Scores, cli.StringFlag{Name: "scores", Category: "Inputs", Required: true, Usage: "scores dataset `DIR` of those rollouts (outcome rewards)"}),
		app.String(&in.Logprobs, cli.StringFlag{Name: "logprobs", Category: "Inputs", Required: true, Usage: "logprobs dataset `DIR` of those rollouts (p_mem, p_full)"}),
		app.Bool(&cfg.NoStdNorm, cli.BoolFlag{Name: "no-std-norm", Category: "Advantage", Usage: "outcome advantage R − mean without dividing by the group std (Dr.GRPO)"}),
		app.Text(&cfg.MemBaseline, cli.StringFlag{Name: "mem-baseline", Category: "Advantage", Value: cfg.MemBaseline.String(), Usage: "memory reward baseline b in R^M = P_mem − b: full (b = P_full), context (b = P_ctx, scored by mempo-logprob --p-ctx), const:<v> (|v| at most 1e6), or none"}, stage.ParseBaseline),
		app.Enum(&cfg.MemPool, cli.StringFlag{Name: "mem-pool", Category: "Advantage", Usage: "memory advantage normalisation pool: question (all trajectories × turns of a question) or turn (per turn index)"}, stage.ParsePool),
		app.Float64(&cfg.MemCoef, cli.Float64Flag{Name: "mem-coef", Category: "Advantage", Usage: "λ, the weight of the memory advantage on <mem> tokens; 0 is plain GRPO; at most 1e6 in magnitude"}),
		app.Bool(&cfg.MemContentOnly, cli.BoolFlag{Name: "mem-content-only", Category: "Advantage", Usage: "add λ·A^M only on the memory's content tokens, not on its <mem> and </mem> tag tokens (default: the whole span, tags included, as MemPO); decodes the responses with the tokenizer of the rollouts' policy, so run it from the directory the rollouts were made in (docs/memory-drift.md)"}),
	})
}

func (cmd *command) run(c *cli.Context) error {
	spec, err := app.StageSpec(c)
	if err != nil {
		return err
	}
	if err := cmd.cfg.Validate(); err != nil {
		return app.Usage(err)
	}
	_, err = stage.Run(c.Context, cmd.cfg, cmd.in, spec)
	return err
}
