// Package initmodel is `mempo init-model`: it trains the embedded default's byte-level
// BPE tokenizer on a task corpus plus the agent protocol's own texts, and writes a
// randomly initialised Qwen2 preset sized to that tokenizer as an HF checkpoint
// directory (DESIGN.md §8): config.json, generation_config.json, model.safetensors,
// tokenizer.json with tokenizer_config.json and special_tokens_map.json (the set
// transformers' AutoTokenizer needs for eos and the chat template), and checkpoint.json,
// the commit record every mempo checkpoint has (format.Commit), so later stages key it by
// that record.
//
// The output is a function of the config, the corpus bytes and the protocol: the same
// inputs give the same bytes, and a rerun finds checkpoint.json with the same key and
// does nothing.
package initmodel

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"

	"github.com/mempo/mempo/agent/protocol"
	"github.com/mempo/mempo/format"
	"github.com/mempo/mempo/jobs"
	"github.com/mempo/mempo/model/bpe"
	"github.com/mempo/mempo/model/qwen2"
)

// Stage names init-model in keys and records.
const Stage = "init-model"

// vocabMultiple pads the embedding rows above the tokenizer's size, as HF checkpoints
// do, so the matrix shapes stay GEMM-friendly.
const vocabMultiple = 64

// ErrInput marks unusable inputs or config: a missing or empty corpus, a bad size.
var ErrInput = errors.New("invalid init-model input")

// Config is the resolved configuration of init-model; its canonical JSON is keyed.
type Config struct {
	// VocabSize bounds the tokenizer: special tokens, 256 byte tokens and the merges.
	VocabSize int `json:"vocab_size"`
	// MinFrequency is the fewest occurrences a pair needs to be merged.
	MinFrequency int `json:"min_frequency"`
	// Preset names the model shape (qwen2.Preset), e.g. "tiny".
	Preset string `json:"preset"`
	// Seed fixes the random weights.
	Seed uint64 `json:"seed"`
}

// DefaultConfig is the demo's: a 4096-token tokenizer and the tiny preset.
func DefaultConfig() Config {
	return Config{VocabSize: 4096, MinFrequency: 2, Preset: "tiny", Seed: 1}
}

// Validate names the first bad field by its flag.
func (c Config) Validate() error {
	if c.VocabSize <= len(bpe.DefaultSpecial())+256 {
		return fmt.Errorf("--vocab %d: want more than the %d special and byte tokens: %w", c.VocabSize, len(bpe.DefaultSpecial())+256, ErrInput)
	}
	if c.MinFrequency < 1 {
		return fmt.Errorf("--min-frequency %d: want >= 1: %w", c.MinFrequency, ErrInput)
	}
	if _, err := qwen2.Preset(c.Preset, 0); err != nil {
		return fmt.Errorf("--preset: %w", err)
	}
	return nil
}

// Inputs are the files init-model reads.
type Inputs struct {
	// Corpus lists Search-R1 JSONL corpora (".gz" is read compressed), in order.
	Corpus []string
	// Prompts lists prompts datasets whose questions the tokenizer also learns; optional.
	Prompts []string
	// Protocol is the agent protocol whose texts the tokenizer learns; nil is the default.
	Protocol *protocol.Protocol
}

// Result says what Run did.
type Result struct {
	Dir    string
	Hit    bool // Out already held this exact output
	Key    jobs.Key
	Commit *format.Commit // the checkpoint's commit record
	// TokenizerVocab is the tokenizer's id count, ModelVocab the embedding rows and
	// Params the model's parameter count.
	TokenizerVocab, ModelVocab int
	Params                     int64
}

// Run makes spec.Out hold the checkpoint of cfg and in (spec.Force, Log and KeyDebug
// apply; it is one checkpoint, so the shard and merge fields do not). It trains the tokenizer and builds
// the model in a temp dir beside out and commits it through the checkpoint runtime
// (jobs.Begin, Artifact.Publish): checkpoint.json is written last and the directory
// renamed over out, so out is never a half-written checkpoint. A failed run removes
// its temp dir: there is nothing to resume.
func Run(ctx context.Context, cfg Config, in Inputs, spec jobs.Spec) (*Result, error) {
	out, log := spec.Out, spec.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if out == "" {
		return nil, fmt.Errorf("init-model: no output directory (--out): %w", ErrInput)
	}
	if len(in.Corpus) == 0 {
		return nil, fmt.Errorf("init-model: no --corpus: the tokenizer needs texts: %w", ErrInput)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	p := in.Protocol
	if p == nil {
		p = protocol.Default()
	}
	inputs, err := keyedInputs(in)
	if err != nil {
		return nil, err
	}
	key, err := runKey(cfg, p, inputs, spec.KeyDebug)
	if err != nil {
		return nil, err
	}
	art, hit, err := jobs.Begin(jobs.Spec{Out: out, Force: spec.Force, Log: log}, key)
	if err != nil {
		return nil, fmt.Errorf("init-model: %w", err)
	}
	if hit != nil {
		log.Info("cache hit", "dir", out, "key", key.Short())
		return describe(&Result{Dir: out, Hit: true, Key: key, Commit: hit})
	}
	defer art.Release()
	res, err := commit(ctx, art, cfg, in, p, inputs)
	if err != nil {
		os.RemoveAll(art.Tmp)
		return nil, fmt.Errorf("init-model: %w", jobs.DiskFull(err, ""))
	}
	return res, nil
}

// keyedInputs names the corpora and prompts datasets by digest.
func keyedInputs(in Inputs) ([]format.Input, error) {
	var inputs []format.Input
	for i, path := range in.Corpus {
		input, err := jobs.FileInput("corpus"+strconv.Itoa(i), path)
		if err != nil {
			return nil, fmt.Errorf("init-model: --corpus: %w", err)
		}
		inputs = append(inputs, input)
	}
	for i, dir := range in.Prompts {
		input, err := jobs.DatasetInput("prompts"+strconv.Itoa(i), dir)
		if err != nil {
			return nil, fmt.Errorf("init-model: --prompts: %w", err)
		}
		inputs = append(inputs, input)
	}
	return inputs, nil
}

// keyed is what init-model's key holds as its config: the flags and the protocol
// whose texts the tokenizer learns.
type keyed struct {
	Config   Config             `json:"config"`
	Protocol *protocol.Protocol `json:"protocol"`
}

// runKey keys the checkpoint as every checkpoint is keyed (jobs.KeySpec): stage, code,
// the config with the protocol, the corpora and prompts datasets by digest, and the
// seed of the weights.
func runKey(cfg Config, p *protocol.Protocol, inputs []format.Input, debug io.Writer) (jobs.Key, error) {
	conf, err := jobs.CanonicalJSON(keyed{Config: cfg, Protocol: p})
	if err != nil {
		return jobs.Key{}, fmt.Errorf("init-model: encode config: %w", err)
	}
	return jobs.KeySpec{Stage: Stage, Schema: jobs.CheckpointSchema, Config: conf, Inputs: inputs, Seed: int64(cfg.Seed)}.Key(debug), nil
}

// commit builds the checkpoint in art.Tmp, which a killed earlier run may have left
// holding anything, and publishes it.
func commit(ctx context.Context, art *jobs.Artifact, cfg Config, in Inputs, p *protocol.Protocol, inputs []format.Input) (*Result, error) {
	if err := os.RemoveAll(art.Tmp); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(art.Tmp, 0o755); err != nil {
		return nil, err
	}
	res := &Result{Dir: art.Out, Key: art.Key}
	if err := build(ctx, cfg, in, p, art.Tmp, res); err != nil {
		return nil, err
	}
	var err error
	if res.Commit, err = art.Publish(format.Commit{Stage: Stage, Seed: int64(cfg.Seed), Inputs: inputs}); err != nil {
		return nil, err
	}
	return res, nil
}

// describe fills a cache hit's sizes from the checkpoint itself: its tokenizer and
// config.json.
func describe(res *Result) (*Result, error) {
	tok, err := bpe.Load(filepath.Join(res.Dir, format.TokenizerFile))
	if err != nil {
		return nil, fmt.Errorf("init-model: cache hit %s: %w", res.Dir, err)
	}
	mc, err := qwen2.ReadConfig(filepath.Join(res.Dir, qwen2.ConfigFile))
	if err != nil {
		return nil, fmt.Errorf("init-model: cache hit %s: %w", res.Dir, err)
	}
	res.TokenizerVocab, res.ModelVocab, res.Params = tok.VocabSize(), mc.VocabSize, mc.NumParams()
	return res, nil
}

// build trains the tokenizer and writes the model and tokenizer into dir.
func build(ctx context.Context, cfg Config, in Inputs, p *protocol.Protocol, dir string, res *Result) error {
	var readErr error
	tok, err := bpe.Train(trainingTexts(p, in.Corpus, in.Prompts, &readErr), bpe.TrainConfig{
		VocabSize: cfg.VocabSize, Special: bpe.DefaultSpecial(), MinFrequency: cfg.MinFrequency})
	if readErr != nil {
		return readErr
	}
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	res.TokenizerVocab = tok.VocabSize()
	res.ModelVocab = (tok.VocabSize() + vocabMultiple - 1) / vocabMultiple * vocabMultiple
	mc, err := qwen2.Preset(cfg.Preset, res.ModelVocab)
	if err != nil {
		return err
	}
	eos, ok1 := tok.Special(bpe.ImEnd)
	bos, ok2 := tok.Special(bpe.EndOfText)
	if !ok1 || !ok2 {
		return fmt.Errorf("trained tokenizer lacks %s or %s", bpe.ImEnd, bpe.EndOfText)
	}
	e, b := int(eos), int(bos)
	mc.EOSTokenID, mc.BOSTokenID = &e, &b
	// The tokenizer set names the same eos and bos as config.json, so transformers'
	// eos_token_id agrees with the model's, and its chat template is the protocol's glue.
	if err := tok.SaveHF(dir, bpe.DefaultHFConfig(mc.MaxPositions)); err != nil {
		return err
	}
	res.Params = mc.NumParams()
	m, err := qwen2.New(mc, qwen2.Options{Device: "cpu"})
	if err != nil {
		return err
	}
	defer m.Drop()
	if err := m.Init(cfg.Seed); err != nil {
		return err
	}
	return m.Save(dir, 0)
}
