package train

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/mempo/mempo/format"
	"github.com/mempo/mempo/jobs"
	"github.com/mempo/mempo/model/bpe"
	"github.com/mempo/mempo/model/chat"
	"github.com/mempo/mempo/model/qwen2"
)

// copyTokenizer gives the checkpoint in dir the tokenizer set of from: tokenizer.json
// and its companions tokenizer_config.json and special_tokens_map.json. A from without
// tokenizer.json gives nothing. Each companion from has is copied byte for byte, so a
// user's checkpoint keeps its chat template and special tokens through training; one
// it lacks (checkpoints written before they existed, or a tokenizer.json brought alone)
// is generated from its tokenizer and mc: eos and bos as config.json names them, pad
// <|endoftext|> when the tokenizer has it, and from's chat template, else the ChatML
// template the agent protocol renders prompts with.
func copyTokenizer(dir, from string, mc qwen2.Config) error {
	src := filepath.Join(from, format.TokenizerFile)
	if _, err := os.Stat(src); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err := jobs.CopyFile(filepath.Join(dir, format.TokenizerFile), src); err != nil {
		return err
	}
	var missing []string
	for _, name := range bpe.CompanionFiles {
		err := jobs.CopyFile(filepath.Join(dir, name), filepath.Join(from, name))
		if errors.Is(err, fs.ErrNotExist) {
			missing = append(missing, name)
		} else if err != nil {
			return err
		}
	}
	if len(missing) == 0 {
		return nil
	}
	tok, err := bpe.Load(src)
	if err != nil {
		return err
	}
	cfg, err := hfConfig(tok, mc)
	if err != nil {
		return fmt.Errorf("tokenizer of %s: %w", from, err)
	}
	if t, err := chat.Load(from); err == nil {
		cfg.ChatTemplate = t.Source
	} else if !errors.Is(err, chat.ErrNoTemplate) {
		return err
	}
	gen, err := os.MkdirTemp("", "mempo-tokenizer-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(gen)
	if err := tok.SaveHFConfig(gen, cfg); err != nil {
		return err
	}
	for _, name := range missing {
		if err := jobs.CopyFile(filepath.Join(dir, name), filepath.Join(gen, name)); err != nil {
			return err
		}
	}
	return nil
}

// hfConfig is the tokenizer_config.json of tok for a model with config mc.
func hfConfig(tok *bpe.Tokenizer, mc qwen2.Config) (bpe.HFConfig, error) {
	cfg := bpe.HFConfig{ModelMaxLength: mc.MaxPositions, ChatTemplate: bpe.ChatTemplate}
	for _, c := range []struct {
		field string
		id    *int
		dst   *string
	}{{"eos_token_id", mc.EOSTokenID, &cfg.EOS}, {"bos_token_id", mc.BOSTokenID, &cfg.BOS}} {
		if c.id == nil {
			continue
		}
		s, ok := tok.TokenString(int32(*c.id))
		if _, special := tok.Special(s); !ok || !special {
			return cfg, fmt.Errorf("config.json %s %d: not a special token of tokenizer.json: %w", c.field, *c.id, bpe.ErrConfig)
		}
		*c.dst = s
	}
	if _, ok := tok.Special(bpe.EndOfText); ok {
		cfg.Pad = bpe.EndOfText
	}
	return cfg, nil
}
