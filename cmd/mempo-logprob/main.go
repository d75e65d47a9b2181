// Command mempo-logprob scores every rollout turn under the old (rollout) policy and the
// frozen reference, and runs MemPO's memory pass: P_mem and P_full of every turn with a
// memory (DESIGN.md §7).
package main

import (
	"fmt"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/mempo/mempo/agent/protocol"
	"github.com/mempo/mempo/cmd/internal/app"
	"github.com/mempo/mempo/cmd/internal/torchflag"
	"github.com/mempo/mempo/stages/logprob"
)

var (
	rolloutsFlag = &cli.StringFlag{Name: "rollouts", Category: "Inputs", Required: true, Usage: "rollouts dataset `DIR` to score"}
	promptsFlag  = &cli.StringFlag{Name: "prompts", Category: "Inputs", Usage: "prompts dataset `DIR` holding the gold answers (needed by the memory pass)"}
	policyFlag   = &cli.StringFlag{Name: "policy", Category: "Inputs", Required: true, Usage: "checkpoint `DIR` that generated the rollouts (the old policy); its digest must match the rollouts' policy_digest"}
	refFlag      = &cli.StringFlag{Name: "ref", Category: "Inputs", Required: true, Usage: "frozen reference checkpoint `DIR`; when it has the policy's digest, the old log-probs are reused"}
	protoFlag    = &cli.StringFlag{Name: "protocol", Category: "Log-probs", Usage: "protocol description `FILE` whose answer tag and separator the memory pass uses (default: the built-in <answer> and \"; \")"}
	budgetFlag   = &cli.IntFlag{Name: "token-budget", Category: "Log-probs", Value: logprob.DefaultConfig().TokenBudget, Usage: "most rows × padded width of one forward pass"}
	chunkFlag    = &cli.IntFlag{Name: "chunk", Category: "Log-probs", Value: logprob.DefaultConfig().Chunk, Usage: "positions whose [chunk, vocab] logits exist at once"}
	tempFlag     = &cli.Float64Flag{Name: "temperature", Category: "Log-probs", Value: 1, Usage: "the rollouts' sampling temperature; divides the logits of the old and reference passes"}
	memFlag      = &cli.BoolFlag{Name: "memory-pass", Category: "Log-probs", Value: true, Usage: "compute p_mem and p_full for every turn with a memory (--memory-pass=false leaves them null)"}
	deviceFlag   = &cli.StringFlag{Name: "device", Category: "Runtime", Value: "cpu", Usage: "where the models run: cpu, cuda or cuda:N"}
)

func main() {
	flags := append(app.StageFlags(), app.Clone(rolloutsFlag, promptsFlag, policyFlag, refFlag, protoFlag,
		budgetFlag, chunkFlag, tempFlag, memFlag, deviceFlag, torchflag.Threads)...)
	os.Exit(app.Main(app.New("mempo-logprob", "old/ref log-probs and the memory pass (P_mem, P_full) of rollouts", flags, run), os.Args))
}

func run(c *cli.Context) error {
	spec, err := app.StageSpec(c)
	if err != nil {
		return err
	}
	cfg := logprob.DefaultConfig()
	cfg.TokenBudget, cfg.Chunk = c.Int(budgetFlag.Name), c.Int(chunkFlag.Name)
	cfg.Temperature, cfg.MemoryPass, cfg.Device = c.Float64(tempFlag.Name), c.Bool(memFlag.Name), c.String(deviceFlag.Name)
	if path := c.String(protoFlag.Name); path != "" {
		p, err := protocol.Load(path)
		if err != nil {
			return err
		}
		cfg.AnswerOpen, cfg.AnswerSeparator, cfg.Probe = p.Answer.Open, p.AnswerSeparator, p.MemoryProbe
	}
	if err := cfg.Validate(); err != nil {
		return app.Usage(err)
	}
	if err := torchflag.Apply(c); err != nil {
		return err
	}
	in := logprob.Inputs{Rollouts: c.String(rolloutsFlag.Name), Prompts: c.String(promptsFlag.Name),
		Policy: c.String(policyFlag.Name), Ref: c.String(refFlag.Name)}
	if cfg.MemoryPass && in.Prompts == "" {
		return app.Usage(fmt.Errorf("--prompts is required by the memory pass (or pass --memory-pass=false)"))
	}
	_, err = logprob.Run(c.Context, cfg, in, spec)
	return err
}
