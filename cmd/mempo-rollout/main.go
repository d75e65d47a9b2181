// Command mempo-rollout is the rollout stage of a MemPO iteration (DESIGN.md §3, §6):
// prompts + policy checkpoint + retriever → rollouts dataset, one row per (uid, sample,
// turn) with the exact context ids, the generated ids and their sampling log-probs.
package main

import (
	"os"

	"github.com/urfave/cli/v2"

	"github.com/mempo/mempo/agent/protocol"
	"github.com/mempo/mempo/agent/search"
	"github.com/mempo/mempo/cmd/internal/app"
	"github.com/mempo/mempo/cmd/internal/torchflag"
	"github.com/mempo/mempo/stages/rollout"
)

var def = rollout.DefaultConfig()

var (
	promptsFlag  = &cli.StringFlag{Name: "prompts", Category: "Inputs", Required: true, TakesFile: true, Usage: "prompts dataset `DIR` to roll out"}
	policyFlag   = &cli.StringFlag{Name: "policy", Category: "Inputs", Required: true, TakesFile: true, Usage: "policy checkpoint `DIR` in HF layout (config.json, safetensors, tokenizer.json)"}
	indexFlag    = &cli.StringFlag{Name: "index", Category: "Inputs", TakesFile: true, Usage: "local BM25 index `DIR` built by 'mempo index' (or use --retriever-url)"}
	urlFlag      = &cli.StringFlag{Name: "retriever-url", Category: "Inputs", Usage: "Search-R1 retrieval server `URL` (http://host:port or its /retrieve endpoint), instead of --index"}
	protocolFlag = &cli.StringFlag{Name: "protocol", Category: "Inputs", TakesFile: true, Usage: "protocol description `FILE` (tags, prompt, observation format); default: the built-in MemPO format"}

	nFlag        = &cli.IntFlag{Name: "n", Category: "Rollout", Value: def.N, Usage: "trajectories sampled per prompt (the GRPO group size)"}
	contextFlag  = &cli.StringFlag{Name: "context", Category: "Rollout", Value: string(def.Context), Usage: "context policy: mempo (prompt + previous memory and action + latest observation), mem1 (prompt + previous turn + latest observation) or full (everything)"}
	turnsFlag    = &cli.IntFlag{Name: "max-turns", Category: "Rollout", Value: def.MaxTurns, Usage: "turn budget per trajectory; the observation before the last turn tells the agent to answer, and a last turn that does not answer ends with finish max_turns"}
	newTokFlag   = &cli.IntFlag{Name: "max-new-tokens", Category: "Rollout", Value: def.MaxNewTokens, Usage: "tokens generated per turn at most; a turn cut there without a complete action has finish length"}
	tempFlag     = &cli.Float64Flag{Name: "temperature", Category: "Rollout", Value: def.Temperature, Usage: "sampling temperature; 0 is greedy"}
	topPFlag     = &cli.Float64Flag{Name: "top-p", Category: "Rollout", Value: def.TopP, Usage: "nucleus sampling mass; 1 keeps every token"}
	topKFlag     = &cli.IntFlag{Name: "top-k", Category: "Rollout", Value: def.TopK, Usage: "sample among the k most likely tokens; 0 keeps every token"}
	retTopKFlag  = &cli.IntFlag{Name: "retrieval-topk", Category: "Rollout", Value: def.RetrievalTopK, Usage: "documents returned per search"}
	offsetFlag   = &cli.IntFlag{Name: "prompt-offset", Category: "Rollout", Usage: "first prompt of the slice to roll out, in uid order (a fixed shuffle); wraps around"}
	limitFlag    = &cli.IntFlag{Name: "prompt-limit", Category: "Rollout", Usage: "prompts to roll out from --prompt-offset on (default 0: all); iteration k of a run uses offset k·limit"}
	ppsFlag      = &cli.IntFlag{Name: "prompts-per-shard", Category: "Rollout", Value: def.PromptsPerShard, Usage: "prompts per output shard; all their trajectories are generated together, so this sets the batch size"}
	deviceFlag   = &cli.StringFlag{Name: "device", Category: "Runtime", Value: def.Device, Usage: "where the policy runs: cpu, cuda or cuda:N"}
	dtypeFlag    = &cli.StringFlag{Name: "dtype", Category: "Runtime", Usage: "weight precision: float32, bfloat16 or float16 (default: the checkpoint's)"}
	batchFlag    = &cli.IntFlag{Name: "max-batch", Category: "Runtime", Usage: "sequences per generate call at most, to bound memory (default 0: every running trajectory of the shard)"}
	timeoutFlag  = &cli.Float64Flag{Name: "retriever-timeout", Category: "Runtime", Value: search.DefaultTimeoutS, Usage: "seconds one retrieval request may take"}
	attemptsFlag = &cli.IntFlag{Name: "retriever-attempts", Category: "Runtime", Value: search.DefaultAttempts, Usage: "tries per retrieval request before the server counts as unreachable"}
)

func main() {
	flags := append(app.StageFlags(), app.Clone(promptsFlag, policyFlag, indexFlag, urlFlag, protocolFlag,
		nFlag, contextFlag, turnsFlag, newTokFlag, tempFlag, topPFlag, topKFlag, retTopKFlag, offsetFlag, limitFlag, ppsFlag,
		deviceFlag, dtypeFlag, torchflag.Threads, batchFlag, timeoutFlag, attemptsFlag)...)
	os.Exit(app.Main(app.New("mempo-rollout", "roll out a policy on prompts: multi-turn search episodes to a rollouts dataset", flags, run), os.Args))
}

func run(c *cli.Context) error {
	spec, err := app.StageSpec(c)
	if err != nil {
		return err
	}
	policy, err := protocol.ParseContextPolicy(c.String(contextFlag.Name))
	if err != nil {
		return app.Usage(err)
	}
	cfg := rollout.Config{
		N: c.Int(nFlag.Name), Context: policy, MaxTurns: c.Int(turnsFlag.Name),
		Temperature: c.Float64(tempFlag.Name), TopP: c.Float64(topPFlag.Name), TopK: c.Int(topKFlag.Name),
		MaxNewTokens: c.Int(newTokFlag.Name), RetrievalTopK: c.Int(retTopKFlag.Name),
		PromptOffset: c.Int(offsetFlag.Name), PromptLimit: c.Int(limitFlag.Name),
		PromptsPerShard: c.Int(ppsFlag.Name), RetrieverURL: c.String(urlFlag.Name),
		Device: c.String(deviceFlag.Name), DType: c.String(dtypeFlag.Name), MaxBatch: c.Int(batchFlag.Name),
	}
	if path := c.String(protocolFlag.Name); path != "" {
		if cfg.Protocol, err = protocol.Load(path); err != nil {
			return err
		}
	}
	if err := cfg.Validate(); err != nil {
		return app.Usage(err)
	}
	if err := torchflag.Apply(c); err != nil {
		return err
	}
	in := rollout.Inputs{Prompts: c.String(promptsFlag.Name), Policy: c.String(policyFlag.Name), Index: c.String(indexFlag.Name),
		Client: search.ClientConfig{TimeoutS: c.Float64(timeoutFlag.Name), Attempts: c.Int(attemptsFlag.Name)}}
	_, err = rollout.Run(c.Context, cfg, in, spec)
	return err
}
