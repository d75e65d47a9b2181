package main

import (
	"fmt"
	"log/slog"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/mempo/mempo/agent/protocol"
	"github.com/mempo/mempo/cmd/internal/app"
	"github.com/mempo/mempo/stages/initmodel"
)

var (
	initModelDefault = initmodel.DefaultConfig()

	initModelCorpusFlag = &cli.StringSliceFlag{
		Name: "corpus", Category: "Inputs", Required: true, TakesFile: true,
		Usage: `Search-R1 JSONL corpus ({"id", "contents"} per line, ".gz" read compressed) the tokenizer learns from; repeat for several`,
	}
	initModelPromptsFlag = &cli.StringSliceFlag{
		Name: "prompts", Category: "Inputs", TakesFile: true,
		Usage: "prompts dataset `DIR` whose questions the tokenizer also learns (they open every context); repeat for several",
	}
	initModelProtocolFlag = &cli.StringFlag{
		Name: "protocol", Category: "Inputs", TakesFile: true,
		Usage: "protocol description `FILE` whose prompt, observation and messages the tokenizer also learns (default: the built-in MemPO format)",
	}
	initModelOutFlag = &cli.StringFlag{
		Name: app.OutFlag.Name, Category: "Output", Required: true, TakesFile: true,
		Usage: "checkpoint `DIR` to write in HF layout (config.json, model.safetensors, tokenizer.json, …); replaced only once complete",
	}
	initModelVocabFlag = &cli.IntFlag{
		Name: "vocab", Category: "Tokenizer", Value: initModelDefault.VocabSize,
		Usage: "tokenizer size: special tokens, 256 byte tokens and the learned merges; the model's vocab_size is this rounded up to a multiple of 64",
	}
	initModelMinFreqFlag = &cli.IntFlag{
		Name: "min-frequency", Category: "Tokenizer", Value: initModelDefault.MinFrequency,
		Usage: "fewest occurrences of a pair for it to be merged; training stops early when no pair is that frequent",
	}
	initModelPresetFlag = &cli.StringFlag{
		Name: "preset", Category: "Model", Value: initModelDefault.Preset,
		Usage: "model shape: tiny (≈4M parameters with a 4k vocabulary, the CPU demo) or qwen2.5-0.5b-shape",
	}
	initModelSeedFlag = &cli.Uint64Flag{
		Name: app.SeedFlag.Name, Category: "Model", Value: initModelDefault.Seed,
		Usage: "seed of the random weights; the same seed and inputs give the same bytes",
	}
)

var initModelCommand = &cli.Command{
	Name:  "init-model",
	Usage: "train a byte-level BPE tokenizer on a corpus and write a randomly initialised Qwen2 checkpoint",
	Description: `Trains a byte-level BPE tokenizer (Qwen2's pre-tokenizer, ChatML and agent tags
as special tokens) on the corpus documents, rendered as the observations the agent
will read, on the questions of any --prompts datasets, and on the agent protocol's
own prompt and messages. Then writes a
Qwen2 model of --preset with vocab_size fitted to the tokenizer and weights drawn
from --seed, in HF layout: config.json, generation_config.json (eos = <|im_end|>),
model.safetensors, tokenizer.json, and init.json recording the inputs by digest.
The checkpoint is built beside --out and renamed into place; a rerun with the same
inputs and flags finds init.json with the same key and does nothing.`,
	Flags: append([]cli.Flag{initModelCorpusFlag, initModelPromptsFlag, initModelProtocolFlag, initModelOutFlag,
		initModelVocabFlag, initModelMinFreqFlag, initModelPresetFlag, initModelSeedFlag},
		app.Clone(app.ForceFlag, app.LogLevelFlag, app.DebugFlag)...),
	Action: runInitModel,
}

func runInitModel(c *cli.Context) error {
	if c.Args().Present() {
		return fmt.Errorf("unexpected argument %q: init-model takes only flags: %w", c.Args().First(), app.ErrUsage)
	}
	cfg := initmodel.Config{
		VocabSize:    c.Int(initModelVocabFlag.Name),
		MinFrequency: c.Int(initModelMinFreqFlag.Name),
		Preset:       c.String(initModelPresetFlag.Name),
		Seed:         c.Uint64(initModelSeedFlag.Name),
	}
	if err := cfg.Validate(); err != nil {
		return app.Usage(err)
	}
	in := initmodel.Inputs{Corpus: c.StringSlice(initModelCorpusFlag.Name), Prompts: c.StringSlice(initModelPromptsFlag.Name)}
	if path := c.String(initModelProtocolFlag.Name); path != "" {
		p, err := protocol.Load(path)
		if err != nil {
			return err
		}
		in.Protocol = p
	}
	stderr := c.App.ErrWriter
	if stderr == nil {
		stderr = c.App.Writer
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(c.String(app.LogLevelFlag.Name))); err != nil {
		return fmt.Errorf("--log-level %q: want debug, info, warn or error: %w", c.String(app.LogLevelFlag.Name), app.ErrUsage)
	}
	opts := initmodel.Options{Force: c.Bool(app.ForceFlag.Name), Log: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))}
	for _, sw := range strings.Split(c.String(app.DebugFlag.Name), ",") {
		switch strings.TrimSpace(sw) {
		case "":
		case "keyhash":
			opts.KeyDebug = stderr
		default:
			return fmt.Errorf("--debug %q: unknown switch %q, want keyhash: %w", c.String(app.DebugFlag.Name), sw, app.ErrUsage)
		}
	}
	res, err := initmodel.Run(c.Context, cfg, in, c.String(initModelOutFlag.Name), opts)
	if err != nil {
		return err
	}
	r := res.Record
	status := "wrote"
	if res.Hit {
		status = "cache hit:"
	}
	fmt.Fprintf(c.App.Writer, "init-model: %s %s (tokenizer %d tokens, %s %d parameters, vocab_size %d, key %.12s)\n",
		status, res.Dir, r.TokenizerVocab, r.Config.Preset, r.Params, r.ModelVocab, r.Key)
	return nil
}
