// Package rollout is the command line of mempo-rollout, the rollout stage of a MemPO
// iteration (DESIGN.md §3, §6): prompts + policy checkpoint + retriever → rollouts
// dataset, one row per (uid, sample, turn) with the exact context ids, the generated ids
// and their sampling log-probs.
package rollout

import (
	"github.com/urfave/cli/v2"

	"github.com/mempo/mempo/agent/protocol"
	"github.com/mempo/mempo/agent/search"
	"github.com/mempo/mempo/cmd/internal/app"
	"github.com/mempo/mempo/cmd/internal/torchflag"
	stage "github.com/mempo/mempo/stages/rollout"
)

// App is mempo-rollout's command line: the app its main runs, and the mempo executable
// when invoked under the name mempo-rollout.
func App() *cli.App {
	cmd := command{cfg: stage.DefaultConfig(),
		in: stage.Inputs{Client: search.ClientConfig{TimeoutS: search.DefaultTimeoutS, Attempts: search.DefaultAttempts},
			Engine: stage.DefaultEngineClient()}}
	return app.New("mempo-rollout", "roll out a policy on prompts: multi-turn search episodes to a rollouts dataset", cmd.flags(), cmd.run)
}

// command is what mempo-rollout's flags resolve into.
type command struct {
	cfg stage.Config
	in  stage.Inputs
}

func (cmd *command) flags() *app.Flags {
	cfg, in := &cmd.cfg, &cmd.in
	return app.Bind(cfg, app.StageFlags(), []app.Flag{
		app.String(&in.Prompts, cli.StringFlag{Name: "prompts", Category: "Inputs", Required: true, TakesFile: true, Usage: "prompts dataset `DIR` to roll out"}),
		app.String(&in.Policy, cli.StringFlag{Name: "policy", Category: "Inputs", Required: true, TakesFile: true, Usage: "policy checkpoint `DIR` in HF layout (config.json, safetensors, tokenizer.json)"}),
		app.String(&in.Index, cli.StringFlag{Name: "index", Category: "Inputs", TakesFile: true, Usage: "local BM25 index `DIR` built by 'mempo index' (or use --retriever-url)"}),
		app.String(&cfg.RetrieverURL, cli.StringFlag{Name: "retriever-url", Category: "Inputs", Usage: "Search-R1 retrieval server `URL` (http://host:port or its /retrieve endpoint), instead of --index"}),
		app.Load(&cfg.Protocol, cli.StringFlag{Name: "protocol", Category: "Inputs", TakesFile: true, Usage: "protocol description `FILE` (tags, prompt, observation format); default: the built-in MemPO format"}, protocol.Load),
		torchflag.ChatTemplate(&cfg.ChatTemplate),

		app.Int(&cfg.N, cli.IntFlag{Name: "n", Category: "Rollout", Usage: "trajectories sampled per prompt (the GRPO group size)"}),
		app.Enum(&cfg.Context, cli.StringFlag{Name: "context", Category: "Rollout", Usage: "context policy: mempo (prompt + previous memory and action + latest observation), mem1 (prompt + previous turn + latest observation) or full (everything)"}, protocol.ParseContextPolicy),
		app.Int(&cfg.MaxTurns, cli.IntFlag{Name: "max-turns", Category: "Rollout", Usage: "turn budget per trajectory; the observation before the last turn tells the agent to answer, and a last turn that does not answer ends with finish max_turns"}),
		app.Int(&cfg.MaxNewTokens, cli.IntFlag{Name: "max-new-tokens", Category: "Rollout", Usage: "tokens generated per turn at most; a turn cut there without a complete action has finish length"}),
		app.Float64(&cfg.Temperature, cli.Float64Flag{Name: "temperature", Category: "Rollout", Usage: "sampling temperature; 0 is greedy"}),
		app.Float64(&cfg.TopP, cli.Float64Flag{Name: "top-p", Category: "Rollout", Usage: "nucleus sampling mass; 1 keeps every token"}),
		app.Int(&cfg.TopK, cli.IntFlag{Name: "top-k", Category: "Rollout", Usage: "sample among the k most likely tokens; 0 keeps every token"}),
		app.Int(&cfg.RetrievalTopK, cli.IntFlag{Name: "retrieval-topk", Category: "Rollout", Usage: "documents returned per search"}),
		app.Int(&cfg.PromptOffset, cli.IntFlag{Name: "prompt-offset", Category: "Rollout", Usage: "first prompt of the slice to roll out, in uid order (a fixed shuffle); wraps around"}),
		app.Int(&cfg.PromptLimit, cli.IntFlag{Name: "prompt-limit", Category: "Rollout", Usage: "prompts to roll out from --prompt-offset on (default 0: all); iteration k of a run uses offset k·limit"}),
		app.Bool(&cfg.SkipLongPrompts, cli.BoolFlag{Name: "skip-long-prompts", Category: "Rollout", Usage: "drop the selected prompts whose first context leaves the model no room for a response (counted in the manifest as prompts_skipped_long, the first few named in a warning) instead of refusing the run"}),
		app.Int(&cfg.PromptsPerShard, cli.IntFlag{Name: "prompts-per-shard", Category: "Rollout", Usage: "prompts per output shard; all their trajectories are generated together, so this sets the batch size"}),
	}, torchflag.Runtime(&cfg.Device, &cfg.DType, &cfg.Attention), []app.Flag{
		app.Int(&cfg.MaxBatch, cli.IntFlag{Name: "max-batch", Category: "Runtime", Usage: "sequences per generate call at most, to bound memory (default 0: every running trajectory of the shard)"}),
		app.Text(&cfg.Engine, cli.StringFlag{Name: "engine", Category: "Engine", Value: stage.EngineLocal,
			Usage: "where the policy generates: local (loaded into this process) or server (an OpenAI-compatible /v1/completions server at --engine-url: 'mempo serve-policy' or vLLM); --policy still names the checkpoint whose tokenizer, config and digest the rows record"}, stage.ParseEngine),
		app.String(&cfg.EngineURL, cli.StringFlag{Name: "engine-url", Category: "Engine", Usage: "completions server `URL` for --engine server (http://host:port, with or without /v1)"}),
		app.String(&cfg.EngineModel, cli.StringFlag{Name: "engine-model", Category: "Engine", Usage: "model `NAME` to request; the server must list it in /v1/models and answer with it (default: the first model it lists)"}),
		app.Int(&cfg.EngineConcurrency, cli.IntFlag{Name: "engine-concurrency", Category: "Engine", Usage: "completion requests in flight to the server at most"}),
		app.Float64(&in.Engine.TimeoutS, cli.Float64Flag{Name: "engine-timeout", Category: "Engine", Usage: "seconds one completion request may take; a timeout is not retried"}),
		app.Int(&in.Engine.Attempts, cli.IntFlag{Name: "engine-attempts", Category: "Engine", Usage: "tries per completion request; only connection errors and 503 are retried, with backoff doubling from 0.5s"}),
		app.Float64(&in.Client.TimeoutS, cli.Float64Flag{Name: "retriever-timeout", Category: "Runtime", Usage: "seconds one retrieval request may take"}),
		app.Int(&in.Client.Attempts, cli.IntFlag{Name: "retriever-attempts", Category: "Runtime", Usage: "tries per retrieval request before the server counts as unreachable"}),
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
