package main

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/mempo/mempo/agent/protocol"
	"github.com/mempo/mempo/cmd/internal/app"
	"github.com/mempo/mempo/jobs"
	"github.com/mempo/mempo/stages/initmodel"
)

// initModelCmd is what 'mempo init-model' resolves its flags into.
type initModelCmd struct {
	cfg  initmodel.Config
	in   initmodel.Inputs
	spec jobs.Spec
}

func initModelCommand() *cli.Command {
	m := &initModelCmd{cfg: initmodel.DefaultConfig()}
	return app.Command(&cli.Command{
		Name:  "init-model",
		Usage: "train a byte-level BPE tokenizer on a corpus and write a randomly initialised Qwen2 checkpoint",
		Description: `Trains a byte-level BPE tokenizer (Qwen2's pre-tokenizer, ChatML and agent tags
as special tokens) on the corpus documents, rendered as the observations the agent
will read, on the questions of any --prompts datasets, and on the agent protocol's
own prompt and messages. Then writes a
Qwen2 model of --preset with vocab_size fitted to the tokenizer and weights drawn
from --seed, in HF layout: config.json, generation_config.json (eos = <|im_end|>),
model.safetensors, tokenizer.json, and checkpoint.json recording the inputs by digest.
The checkpoint is built beside --out and renamed into place; a rerun with the same
inputs and flags finds checkpoint.json with the same key and does nothing.`,
	}, m.flags(), m.run)
}

func (m *initModelCmd) flags() *app.Flags {
	cfg, in := &m.cfg, &m.in
	return app.Bind(cfg, []app.Flag{
		app.Strings(&in.Corpus, cli.StringSliceFlag{Name: "corpus", Category: "Inputs", Required: true, TakesFile: true,
			Usage: `Search-R1 JSONL corpus ({"id", "contents"} per line, ".gz" read compressed) the tokenizer learns from; repeat for several`}),
		app.Strings(&in.Prompts, cli.StringSliceFlag{Name: "prompts", Category: "Inputs", TakesFile: true,
			Usage: "prompts dataset `DIR` whose questions the tokenizer also learns (they open every context); repeat for several"}),
		app.Load(&in.Protocol, cli.StringFlag{Name: "protocol", Category: "Inputs", TakesFile: true,
			Usage: "protocol description `FILE` whose prompt, observation and messages the tokenizer also learns (default: the built-in MemPO format)"}, protocol.Load),
		app.String(&m.spec.Out, cli.StringFlag{Name: app.OutFlag.Name, Category: "Output", Required: true, TakesFile: true,
			Usage: "checkpoint `DIR` to write in HF layout (config.json, model.safetensors, tokenizer.json, …); replaced only once complete"}),
		app.Int(&cfg.VocabSize, cli.IntFlag{Name: "vocab", Category: "Tokenizer",
			Usage: "tokenizer size: special tokens, 256 byte tokens and the learned merges; the model's vocab_size is this rounded up to a multiple of 64"}),
		app.Int(&cfg.MinFrequency, cli.IntFlag{Name: "min-frequency", Category: "Tokenizer",
			Usage: "fewest occurrences of a pair for it to be merged; training stops early when no pair is that frequent"}),
		app.String(&cfg.Preset, cli.StringFlag{Name: "preset", Category: "Model",
			Usage: "model shape: tiny (≈4M parameters with a 4k vocabulary, the CPU demo), qwen2.5-0.5b-shape or qwen2.5-1.5b-shape"}),
		app.Uint64(&cfg.Seed, cli.Uint64Flag{Name: app.SeedFlag.Name, Category: "Model",
			Usage: "seed of the random weights; the same seed and inputs give the same bytes"}),
		app.Bool(&m.spec.Force, *app.ForceFlag),
	}, app.Unbound(app.LogLevelFlag, app.DebugFlag))
}

func (m *initModelCmd) run(c *cli.Context) error {
	if c.Args().Present() {
		return fmt.Errorf("unexpected argument %q: init-model takes only flags: %w", c.Args().First(), app.ErrUsage)
	}
	if err := m.cfg.Validate(); err != nil {
		return app.Usage(err)
	}
	var err error
	if m.spec.Log, m.spec.KeyDebug, err = app.Logging(c); err != nil {
		return err
	}
	res, err := initmodel.Run(c.Context, m.cfg, m.in, m.spec)
	if err != nil {
		return err
	}
	status := "wrote"
	if res.Hit {
		status = "cache hit:"
	}
	fmt.Fprintf(c.App.Writer, "init-model: %s %s (tokenizer %d tokens, %s %d parameters, vocab_size %d, key %s)\n",
		status, res.Dir, res.TokenizerVocab, m.cfg.Preset, res.Params, res.ModelVocab, res.Key.Short())
	return nil
}
