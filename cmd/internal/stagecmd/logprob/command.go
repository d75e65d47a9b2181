// Package logprob is the command line of mempo-logprob, which scores every rollout turn
// under the old (rollout) policy and the frozen reference, and runs MemPO's memory pass:
// P_mem and P_full of every turn with a memory (DESIGN.md §7).
package logprob

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/mempo/mempo/agent/protocol"
	"github.com/mempo/mempo/cmd/internal/app"
	"github.com/mempo/mempo/cmd/internal/torchflag"
	stage "github.com/mempo/mempo/stages/logprob"
)

// App is mempo-logprob's command line: the app its main runs, and the mempo executable
// when invoked under the name mempo-logprob.
func App() *cli.App {
	cmd := command{cfg: stage.DefaultConfig()}
	return app.New("mempo-logprob", "old/ref log-probs and the memory pass (P_mem, P_full) of rollouts", cmd.flags(), cmd.run)
}

// command is what mempo-logprob's flags resolve into.
type command struct {
	cfg stage.Config
	in  stage.Inputs
}

func (cmd *command) flags() *app.Flags {
	cfg, in := &cmd.cfg, &cmd.in
	return app.Bind(cfg, app.StageFlags(), []app.Flag{
		app.String(&in.Rollouts, cli.StringFlag{Name: "rollouts", Category: "Inputs", Required: true, Usage: "rollouts dataset `DIR` to score"}),
		app.String(&in.Prompts, cli.StringFlag{Name: "prompts", Category: "Inputs", Usage: "prompts dataset `DIR` holding the gold answers (needed by the memory pass)"}),
		app.String(&in.Policy, cli.StringFlag{Name: "policy", Category: "Inputs", Required: true, Usage: "checkpoint `DIR` that generated the rollouts (the old policy); its digest must match the rollouts' policy_digest"}),
		app.String(&in.Ref, cli.StringFlag{Name: "ref", Category: "Inputs", Required: true, Usage: "frozen reference checkpoint `DIR`; when it has the policy's digest, the old log-probs are reused"}),
		app.Func(cli.StringFlag{Name: "protocol", Category: "Log-probs", Usage: "protocol description `FILE` whose answer tag and separator the memory pass uses (default: the built-in <answer> and \"; \")"}, cmd.loadProtocol),
		app.Int(&cfg.TokenBudget, cli.IntFlag{Name: "token-budget", Category: "Log-probs", Usage: "most rows × padded width of one forward pass"}),
		app.Int(&cfg.Chunk, cli.IntFlag{Name: "chunk", Category: "Log-probs", Usage: "positions whose [chunk, vocab] logits exist at once"}),
		app.Float64(&cfg.Temperature, cli.Float64Flag{Name: "temperature", Category: "Log-probs", Usage: "the rollouts' sampling temperature; divides the logits of the old and reference passes"}),
		app.Bool(&cfg.MemoryPass, cli.BoolFlag{Name: "memory-pass", Category: "Log-probs", Usage: "compute p_mem, and the baselines --p-full and --p-ctx select, for every turn with a memory (--memory-pass=false leaves them null)"}),
		app.Bool(&cfg.PFull, cli.BoolFlag{Name: "p-full", Category: "Log-probs", Usage: "compute p_full, the answer's probability after the full un-pruned history (mempo-advantage --mem-baseline full, the default); more than an old pass's work, --p-full=false skips it"}),
		app.Bool(&cfg.PCtx, cli.BoolFlag{Name: "p-ctx", Category: "Log-probs", Usage: "compute p_ctx, the answer's probability after the turn's own pruned context (mempo-advantage --mem-baseline context): answer copies in the old pass, a fraction of its work"}),
		torchflag.Device(&cfg.Device),
		torchflag.DType(&cfg.DType),
		torchflag.Attention(&cfg.Attention),
		torchflag.Threads(),
	})
}

// loadProtocol takes what the memory pass needs from the protocol description at path:
// the answer tag, the separator of the gold answer and the memory probe.
func (cmd *command) loadProtocol(path string) error {
	p, err := protocol.Load(path)
	if err != nil {
		return err
	}
	cmd.cfg.AnswerOpen, cmd.cfg.AnswerSeparator, cmd.cfg.Probe = p.Answer.Open, p.AnswerSeparator, p.MemoryProbe
	return nil
}

func (cmd *command) run(c *cli.Context) error {
	spec, err := app.StageSpec(c)
	if err != nil {
		return err
	}
	if err := cmd.cfg.Validate(); err != nil {
		return app.Usage(err)
	}
	if cmd.cfg.MemoryPass && cmd.in.Prompts == "" {
		return app.Usage(fmt.Errorf("--prompts is required by the memory pass (or pass --memory-pass=false)"))
	}
	_, err = stage.Run(c.Context, cmd.cfg, cmd.in, spec)
	return err
}
