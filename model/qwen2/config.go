package qwen2

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/sugarme/gotch"

	"github.com/mempo/mempo/format"
)

// ErrConfig marks an invalid or unsupported config.json.
var ErrConfig = errors.New("invalid model config")

// Architecture is the HF architectures entry this package implements.
const Architecture = "Qwen2ForCausalLM"

// Config holds the Qwen2 hyperparameters, with the field names of HF's config.json.
type Config struct {
	Architectures []string `json:"architectures"`
	ModelType     string   `json:"model_type"`
	// HiddenSize is the residual width; head_dim = HiddenSize / NumHeads.
	HiddenSize       int `json:"hidden_size"`
	IntermediateSize int `json:"intermediate_size"`
	NumLayers        int `json:"num_hidden_layers"`
	NumHeads         int `json:"num_attention_heads"`
	// NumKVHeads < NumHeads is grouped-query attention; it must divide NumHeads.
	NumKVHeads   int     `json:"num_key_value_heads"`
	RopeTheta    float64 `json:"rope_theta"`
	MaxPositions int     `json:"max_position_embeddings"`
	RMSNormEps   float64 `json:"rms_norm_eps"`
	VocabSize    int     `json:"vocab_size"`
	TieEmbedding bool    `json:"tie_word_embeddings"`
	// TorchDType is the stored weight dtype: "float32" or "bfloat16" (also "float16").
	TorchDType string `json:"torch_dtype"`
	HiddenAct  string `json:"hidden_act"`
	// BOS and EOS token ids go to config.json and generation_config.json; nil is null.
	BOSTokenID *int `json:"bos_token_id"`
	EOSTokenID *int `json:"eos_token_id"`
	// PadTokenID is the tokenizer's pad token, in config.json and generation_config.json
	// as transformers' generate looks for it; nil leaves it out. Save fills a nil one
	// from the tokenizer set in the directory it writes (TokenizerPad).
	PadTokenID *int `json:"pad_token_id,omitempty"`
	// InitializerRange is the std of the random initialisation (HF default 0.02).
	InitializerRange float64 `json:"initializer_range"`
	UseSlidingWindow bool    `json:"use_sliding_window"`
	SlidingWindow    *int    `json:"sliding_window"`
	MaxWindowLayers  int     `json:"max_window_layers"`
	AttentionDropout float64 `json:"attention_dropout"`
	UseCache         bool    `json:"use_cache"`
	RopeScaling      any     `json:"rope_scaling"`
}

// required lists the config.json keys a checkpoint must set; HF defaults for these
// describe a 7B model, so silently defaulting would build the wrong network.
var required = []string{
	"hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
	"num_key_value_heads", "rope_theta", "max_position_embeddings", "rms_norm_eps",
	"vocab_size", "tie_word_embeddings", "torch_dtype",
}

// ReadConfig reads and validates an HF config.json.
func ReadConfig(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("read model config: %w", err)
	}
	cfg, err := ParseConfig(data)
	if err != nil {
		return Config{}, fmt.Errorf("read %s: %w", path, err)
	}
	return cfg, nil
}

// ParseConfig decodes and validates config.json bytes.
func ParseConfig(data []byte) (Config, error) {
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(data, &keys); err != nil {
		return Config{}, fmt.Errorf("not a JSON object: %w: %w", err, ErrConfig)
	}
	for _, k := range required {
		if v, ok := keys[k]; !ok || string(v) == "null" {
			return Config{}, fmt.Errorf("field %q is missing: %w", k, ErrConfig)
		}
	}
	cfg := Config{InitializerRange: 0.02, HiddenAct: "silu"}
	if err := json.Unmarshal(data, &cfg); err != nil {
		return Config{}, fmt.Errorf("%w: %w", err, ErrConfig)
	}
	if err := cfg.Validate(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// Validate checks that the config describes a network this package runs.
func (c Config) Validate() error {
	if !slices.Contains(c.Architectures, Architecture) {
		return fmt.Errorf("architectures %q: unknown architecture, want %s: %w", c.Architectures, Architecture, ErrConfig)
	}
	positive := []struct {
		name string
		v    int
	}{
		{"hidden_size", c.HiddenSize}, {"intermediate_size", c.IntermediateSize},
		{"num_hidden_layers", c.NumLayers}, {"num_attention_heads", c.NumHeads},
		{"num_key_value_heads", c.NumKVHeads}, {"max_position_embeddings", c.MaxPositions},
		{"vocab_size", c.VocabSize},
	}
	for _, p := range positive {
		if p.v <= 0 {
			return fmt.Errorf("%s = %d, want > 0: %w", p.name, p.v, ErrConfig)
		}
	}
	switch {
	case c.HiddenSize%c.NumHeads != 0:
		return fmt.Errorf("hidden_size %d is not a multiple of num_attention_heads %d: %w", c.HiddenSize, c.NumHeads, ErrConfig)
	case c.NumHeads%c.NumKVHeads != 0:
		return fmt.Errorf("num_attention_heads %d is not a multiple of num_key_value_heads %d: %w", c.NumHeads, c.NumKVHeads, ErrConfig)
	case c.HeadDim()%2 != 0:
		return fmt.Errorf("head_dim %d is odd; rotary embeddings need an even head_dim: %w", c.HeadDim(), ErrConfig)
	case c.RopeTheta <= 0 || c.RMSNormEps <= 0:
		return fmt.Errorf("rope_theta %g and rms_norm_eps %g must be > 0: %w", c.RopeTheta, c.RMSNormEps, ErrConfig)
	case c.HiddenAct != "" && c.HiddenAct != "silu":
		return fmt.Errorf("hidden_act %q: only silu is implemented: %w", c.HiddenAct, ErrConfig)
	case c.RopeScaling != nil:
		return fmt.Errorf("rope_scaling %v: scaled rotary embeddings are not implemented: %w", c.RopeScaling, ErrConfig)
	case c.UseSlidingWindow:
		return fmt.Errorf("use_sliding_window is true: sliding-window attention is not implemented: %w", ErrConfig)
	}
	if _, err := c.dtype(); err != nil {
		return err
	}
	return nil
}

// HeadDim is the per-head width.
func (c Config) HeadDim() int { return c.HiddenSize / c.NumHeads }

// CheckVocab verifies that every id of a tokenizer with n entries (base vocabulary
// plus added tokens) has an embedding row. HF pads vocab_size above the tokenizer's
// size, so fewer tokenizer ids than rows is fine.
func (c Config) CheckVocab(n int) error {
	if n > c.VocabSize {
		return fmt.Errorf("tokenizer has %d tokens, model vocab_size is %d: tokenizer/model vocab mismatch: %w", n, c.VocabSize, ErrConfig)
	}
	return nil
}

// NumParams counts the model's parameters.
func (c Config) NumParams() int64 {
	h, i, v := int64(c.HiddenSize), int64(c.IntermediateSize), int64(c.VocabSize)
	kv := int64(c.NumKVHeads * c.HeadDim())
	attn := h*h + h + 2*(h*kv+kv) + h*h
	layer := attn + 3*h*i + 2*h
	n := v*h + int64(c.NumLayers)*layer + h
	if !c.TieEmbedding {
		n += v * h
	}
	return n
}

// Encode renders the config as HF writes it (indented JSON, trailing newline).
func (c Config) Encode() ([]byte, error) {
	if c.ModelType == "" {
		c.ModelType = "qwen2"
	}
	if c.HiddenAct == "" {
		c.HiddenAct = "silu"
	}
	return encodeJSON(c)
}

// encodeJSON renders v as indented JSON with a trailing newline, as HF writes.
func encodeJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("encode %T: %w", v, err)
	}
	return buf.Bytes(), nil
}

// generationConfig is the subset of generation_config.json that HF needs. Without a
// pad_token_id, transformers' generate warns on every call and pads with the eos id.
type generationConfig struct {
	BOSTokenID *int `json:"bos_token_id"`
	EOSTokenID *int `json:"eos_token_id"`
	PadTokenID *int `json:"pad_token_id,omitempty"`
}

// tokenizerConfigFile is the tokenizer set's file that names its pad token.
const tokenizerConfigFile = "tokenizer_config.json"

// TokenizerPad is the id of the pad token that dir's tokenizer_config.json names
// (pad_token: the token's content, or an added token object holding it), looked up in
// that file's added_tokens_decoder, else in tokenizer.json's added tokens and
// vocabulary. It is nil when dir has no tokenizer_config.json or the file names no pad
// token. A pad token the tokenizer lacks, or whose id has no embedding row among vocab,
// is an error naming the file.
func TokenizerPad(dir string, vocab int) (*int, error) {
	path := filepath.Join(dir, tokenizerConfigFile)
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("pad token: %w", err)
	}
	var tc struct {
		Pad     json.RawMessage    `json:"pad_token"`
		Decoder map[string]idToken `json:"added_tokens_decoder"`
	}
	if err := json.Unmarshal(data, &tc); err != nil {
		return nil, fmt.Errorf("pad token: read %s: %w: %w", path, err, ErrConfig)
	}
	pad, ok := tokenContent(tc.Pad)
	if !ok {
		return nil, nil
	}
	id, found := -1, false
	for key, t := range tc.Decoder {
		if n, err := strconv.Atoi(key); err == nil && t.Content == pad && (!found || n < id) {
			id, found = n, true
		}
	}
	if !found {
		if id, found, err = tokenID(filepath.Join(dir, format.TokenizerFile), pad); err != nil {
			return nil, err
		}
	}
	if !found {
		return nil, fmt.Errorf("%s: pad_token %q is no token of the tokenizer: tokenizer/model mismatch: %w", path, pad, ErrConfig)
	}
	if id < 0 || id >= vocab {
		return nil, fmt.Errorf("%s: pad_token %q has id %d, model vocab_size is %d: tokenizer/model mismatch: %w", path, pad, id, vocab, ErrConfig)
	}
	return &id, nil
}

// idToken is an added token as tokenizer.json and tokenizer_config.json write it.
type idToken struct {
	ID      int    `json:"id"`
	Content string `json:"content"`
}

// tokenID looks s up in the tokenizer.json at path: its added tokens, then its model's
// vocabulary. A missing file finds nothing.
func tokenID(path, s string) (id int, found bool, err error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("pad token: %w", err)
	}
	var tj struct {
		Added []idToken `json:"added_tokens"`
		Model struct {
			Vocab map[string]int `json:"vocab"`
		} `json:"model"`
	}
	if err := json.Unmarshal(data, &tj); err != nil {
		return 0, false, fmt.Errorf("pad token: read %s: %w: %w", path, err, ErrConfig)
	}
	for _, t := range tj.Added {
		if t.Content == s {
			return t.ID, true, nil
		}
	}
	id, found = tj.Model.Vocab[s]
	return id, found, nil
}

// tokenContent is a special token's text in tokenizer_config.json: a string, or an
// added token object with its content; null, "" and absent are none.
func tokenContent(raw json.RawMessage) (string, bool) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, s != ""
	}
	var t idToken
	if json.Unmarshal(raw, &t) == nil && t.Content != "" {
		return t.Content, true
	}
	return "", false
}

// Presets by name; VocabSize is replaced by the tokenizer's size when given.
var presets = map[string]Config{
	// tiny: about 4M parameters with a 4k vocabulary, small enough for the CPU demo.
	"tiny": {
		HiddenSize: 256, IntermediateSize: 704, NumLayers: 4, NumHeads: 4, NumKVHeads: 2,
		RopeTheta: 10000, MaxPositions: 4096, RMSNormEps: 1e-6, VocabSize: 4096,
		TieEmbedding: true,
	},
	// qwen2.5-0.5b-shape: Qwen2.5-0.5B's dimensions (its config.json) with random
	// weights, for benchmarks; callers may lower NumLayers.
	"qwen2.5-0.5b-shape": {
		HiddenSize: 896, IntermediateSize: 4864, NumLayers: 24, NumHeads: 14, NumKVHeads: 2,
		RopeTheta: 1000000, MaxPositions: 32768, RMSNormEps: 1e-6, VocabSize: 151936,
		TieEmbedding: true,
	},
	// qwen2.5-1.5b-shape: Qwen2.5-1.5B-Instruct's dimensions with random weights, for
	// the accelerator benchmarks; callers may lower NumLayers.
	"qwen2.5-1.5b-shape": {
		HiddenSize: 1536, IntermediateSize: 8960, NumLayers: 28, NumHeads: 12, NumKVHeads: 2,
		RopeTheta: 1000000, MaxPositions: 32768, RMSNormEps: 1e-6, VocabSize: 151936,
		TieEmbedding: true,
	},
}

// Preset returns the named configuration in float32, with vocab_size set to vocab
// when vocab > 0.
func Preset(name string, vocab int) (Config, error) {
	c, ok := presets[name]
	if !ok {
		names := make([]string, 0, len(presets))
		for n := range presets {
			names = append(names, n)
		}
		slices.Sort(names)
		return Config{}, fmt.Errorf("model preset %q: want one of %q: %w", name, names, ErrConfig)
	}
	c.Architectures = []string{Architecture}
	c.ModelType = "qwen2"
	c.HiddenAct = "silu"
	c.TorchDType = "float32"
	c.InitializerRange = 0.02
	c.MaxWindowLayers = c.NumLayers
	c.UseCache = true
	if vocab > 0 {
		c.VocabSize = vocab
	}
	return c, c.Validate()
}

// dtype maps config.json's torch_dtype to a gotch dtype.
func (c Config) dtype() (gotch.DType, error) {
	switch c.TorchDType {
	case "float32":
		return gotch.Float, nil
	case "bfloat16":
		return gotch.BFloat16, nil
	case "float16":
		return gotch.Half, nil
	}
	return gotch.Float, fmt.Errorf("torch_dtype %q: want float32, bfloat16 or float16: %w", c.TorchDType, ErrConfig)
}

// weightDType reports whether d is one of the dtypes above, which a model's weights
// may have.
func weightDType(d gotch.DType) bool {
	return d == gotch.Float || d == gotch.BFloat16 || d == gotch.Half
}

// DTypeName is the torch_dtype name of a floating dtype.
func DTypeName(d gotch.DType) string {
	switch d {
	case gotch.BFloat16:
		return "bfloat16"
	case gotch.Half:
		return "float16"
	}
	return "float32"
}
