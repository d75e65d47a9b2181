// Command mempo-score scores every trajectory of a rollouts dataset against the golds of
// its prompts: answer extraction, SQuAD-normalised EM and F1, format validity, the outcome
// reward, TT/PT/turns (DESIGN.md §7). Pure Go.
package main

import (
	"os"

	"github.com/urfave/cli/v2"

	"github.com/mempo/mempo/agent/protocol"
	"github.com/mempo/mempo/cmd/internal/app"
	"github.com/mempo/mempo/stages/score"
)

var (
	rolloutsFlag = &cli.StringFlag{Name: "rollouts", Category: "Inputs", Required: true, Usage: "rollouts dataset `DIR` to score"}
	promptsFlag  = &cli.StringFlag{Name: "prompts", Category: "Inputs", Required: true, Usage: "prompts dataset `DIR` holding the gold answers"}
	rewardFlag   = &cli.StringFlag{Name: "reward", Category: "Score", Value: "em-all", Usage: "outcome reward: em-all (1 iff the format is valid and every objective matches; MemPO), em-mean (fraction of objectives matched; MEM1-like), or subem-all / subem-mean (the same with Search-R1's substring match: an answer matches when it contains a normalised gold alias)"}
	protoFlag    = &cli.StringFlag{Name: "protocol", Category: "Score", Usage: "protocol description `FILE` whose answer tags to read (default: the built-in <answer>…</answer>)"}
)

func main() {
	flags := append(app.StageFlags(), app.Clone(rolloutsFlag, promptsFlag, rewardFlag, protoFlag)...)
	os.Exit(app.Main(app.New("mempo-score", "score rollouts: answers, EM/F1, rewards, token costs", flags, run), os.Args))
}

func run(c *cli.Context) error {
	spec, err := app.StageSpec(c)
	if err != nil {
		return err
	}
	cfg := score.DefaultConfig()
	if cfg.Reward, err = score.ParseReward(c.String(rewardFlag.Name)); err != nil {
		return app.Usage(err)
	}
	if path := c.String(protoFlag.Name); path != "" {
		p, err := protocol.Load(path)
		if err != nil {
			return err
		}
		cfg.Tags = score.Tags{Open: p.Answer.Open, Close: p.Answer.Close}
	}
	in := score.Inputs{Rollouts: c.String(rolloutsFlag.Name), Prompts: c.String(promptsFlag.Name)}
	_, err = score.Run(c.Context, cfg, in, spec)
	return err
}
