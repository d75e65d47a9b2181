// Package score is the command line of mempo-score, which scores every trajectory of a
// rollouts dataset against the golds of its prompts: answer extraction, SQuAD-normalised
// EM and F1, format validity, the outcome reward, TT/PT/turns (DESIGN.md §7). Pure Go.
package score

import (
	"github.com/urfave/cli/v2"

	"github.com/mempo/mempo/agent/protocol"
	"github.com/mempo/mempo/cmd/internal/app"
	stage "github.com/mempo/mempo/stages/score"
)

// App is mempo-score's command line: the app its main runs, and the mempo executable
// when invoked under the name mempo-score.
func App() *cli.App {
	cmd := command{cfg: stage.DefaultConfig()}
	return app.New("mempo-score", "score rollouts: answers, EM/F1, rewards, token costs", cmd.flags(), cmd.run)
}

// command is what mempo-score's flags resolve into.
type command struct {
	cfg stage.Config
	in  stage.Inputs
}

func (cmd *command) flags() *app.Flags {
	cfg, in := &cmd.cfg, &cmd.in
	return app.Bind(cfg, app.StageFlags(), []app.Flag{
		app.String(&in.Rollouts, cli.StringFlag{Name: "rollouts", Category: "Inputs", Required: true, Usage: "rollouts dataset `DIR` to score"}),
		app.String(&in.Prompts, cli.StringFlag{Name: "prompts", Category: "Inputs", Required: true, Usage: "prompts dataset `DIR` holding the gold answers"}),
		app.Enum(&cfg.Reward, cli.StringFlag{Name: "reward", Category: "Score", Usage: "outcome reward: em-all (1 iff the format is valid and every objective matches; MemPO), em-mean (fraction of objectives matched; MEM1-like), or subem-all / subem-mean (the same with Search-R1's substring match: an answer matches when it contains a normalised gold alias)"}, stage.ParseReward),
		app.Func(cli.StringFlag{Name: "protocol", Category: "Score", Usage: "protocol description `FILE` whose answer tags to read (default: the built-in <answer>…</answer>)"}, cmd.loadProtocol),
	})
}

// loadProtocol takes the answer tags of the protocol description at path.
func (cmd *command) loadProtocol(path string) error {
	p, err := protocol.Load(path)
	if err != nil {
		return err
	}
	cmd.cfg.Tags = stage.Tags{Open: p.Answer.Open, Close: p.Answer.Close}
	return nil
}

func (cmd *command) run(c *cli.Context) error {
	spec, err := app.StageSpec(c)
	if err != nil {
		return err
	}
	_, err = stage.Run(c.Context, cmd.cfg, cmd.in, spec)
	return err
}
