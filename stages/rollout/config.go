package rollout

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/mempo/mempo/format"

	"github.com/mempo/mempo/agent/protocol"
	"github.com/mempo/mempo/agent/search"
	"github.com/mempo/mempo/model/sample"
)

var (
	// ErrConfig marks an unusable rollout config or input; messages name the flag.
	ErrConfig = errors.New("invalid rollout config")
	// ErrTooLong marks a prompt longer than the policy's context; messages name its uid
	// and both lengths.
	ErrTooLong = errors.New("prompt longer than the model's context")
)

// Config is the rollout stage's resolved configuration. Its canonical JSON goes into the
// cache key and the manifest, so every field that can change a row is here.
type Config struct {
	// N is the number of trajectories sampled per prompt (the GRPO group size).
	N int `json:"n"`
	// Context is the context policy: mempo, mem1 or full (DESIGN.md §6).
	Context protocol.ContextPolicy `json:"context"`
	// MaxTurns bounds the turns of a trajectory; the last one is told to answer.
	MaxTurns int `json:"max_turns"`
	// Sampling of each turn's response.
	Temperature  float64 `json:"temperature"`
	TopP         float64 `json:"top_p"`
	TopK         int     `json:"top_k"`
	MaxNewTokens int     `json:"max_new_tokens"`
	// RetrievalTopK is how many documents a search returns (Search-R1: 3).
	RetrievalTopK int `json:"retrieval_topk"`
	// PromptOffset and PromptLimit select a slice of the uid-sorted prompts (uids are
	// hashes, so the order is a fixed shuffle): PromptLimit prompts from PromptOffset
	// on, wrapping around the end; PromptLimit 0 takes them all. An RL iteration k takes
	// offset k·limit, so successive iterations see fresh prompts from one dataset.
	PromptOffset int `json:"prompt_offset"`
	PromptLimit  int `json:"prompt_limit"`
	// SkipLongPrompts drops the selected prompts whose first context leaves the model no
	// room for a response, instead of refusing the run (ErrTooLong): the manifest counts
	// them (prompts_skipped_long) and a warning names the first few.
	SkipLongPrompts bool `json:"skip_long_prompts,omitempty"`
	// PromptsPerShard sizes the shard plan: prompts sorted by uid, in chunks of this
	// many, each chunk's N·PromptsPerShard trajectories advanced together.
	PromptsPerShard int `json:"prompts_per_shard"`
	// Protocol is the turn format; nil is protocol.Default(). Run resolves it, so the
	// keyed config always holds the whole description.
	Protocol *protocol.Protocol `json:"protocol"`
	// RetrieverURL is a Search-R1 retrieval server; empty uses the local index named in
	// Inputs.Index, which is keyed by its own digest instead.
	RetrieverURL string `json:"retriever_url,omitempty"`
	// Device and DType say where and in which precision the policy runs ("" DType keeps
	// the checkpoint's); both can change the sampled tokens, so both are keyed.
	Device string `json:"device"`
	DType  string `json:"dtype,omitempty"`
	// Attention is how passes of several new tokens attend (qwen2.Options.Attention):
	// "" or auto, eager or sdpa. It is keyed: the kernels differ in the last bits.
	Attention string `json:"attention,omitempty"`
	// ChatTemplate says what renders the first context of an episode: "" or
	// "checkpoint", the policy's own Jinja chat template (tokenizer_config.json; the
	// protocol's chat glue, with a warning, when it has none), or "protocol", always the
	// protocol's glue. Keyed: it changes the prompts.
	ChatTemplate string `json:"chat_template,omitempty"`
	// MaxBatch bounds the sequences of one generate call (0: all active trajectories of
	// the shard at once). It bounds memory, not results, so it is not keyed: every
	// request has its own random stream (see qwen2.Generate on batch independence).
	MaxBatch int `json:"-"`
	// Engine is where the policy generates: "" in this process, EngineServer on the
	// completions server at EngineURL. A server's sampler may differ from this
	// process's (vLLM's does), so the engine, its URL and model name are keyed;
	// `mempo serve-policy` gives the in-process rows.
	Engine      string `json:"engine,omitempty"`
	EngineURL   string `json:"engine_url,omitempty"`
	EngineModel string `json:"engine_model,omitempty"`
	// EngineConcurrency bounds the requests in flight to the server; like MaxBatch it
	// bounds load, not results.
	EngineConcurrency int `json:"-"`
}

// DefaultConfig follows the paper: 16 samples, mempo context, 16 turns, plain sampling.
func DefaultConfig() Config {
	return Config{
		N: 16, Context: protocol.Mempo, MaxTurns: 16,
		Temperature: 1, TopP: 1, TopK: 0, MaxNewTokens: 128,
		RetrievalTopK: 3, PromptsPerShard: 8, Device: "cpu", EngineConcurrency: 64,
	}
}

// Sampling is the generation config of one turn, without stop sequences (they come
// from the tokenizer).
func (c Config) Sampling() sample.Config {
	return sample.Config{Temperature: c.Temperature, TopK: c.TopK, TopP: c.TopP, MaxNewTokens: c.MaxNewTokens}
}

// Episode is the protocol's per-episode config.
func (c Config) Episode() protocol.Config {
	return protocol.Config{Context: c.Context, MaxTurns: c.MaxTurns}
}

// Validate names the first bad field by its flag.
func (c Config) Validate() error {
	if c.N < 1 {
		return fmt.Errorf("--n %d: want at least 1 sample per prompt: %w", c.N, ErrConfig)
	}
	if err := c.Episode().Validate(); err != nil {
		return err
	}
	if math.IsInf(c.Temperature, 0) {
		return fmt.Errorf("--temperature %v: want a finite temperature >= 0: %w", c.Temperature, ErrConfig)
	}
	if err := c.Sampling().Validate(); err != nil {
		return fmt.Errorf("sampling (--temperature, --top-p, --top-k, --max-new-tokens): %w", err)
	}
	if c.RetrievalTopK < 1 {
		return fmt.Errorf("--retrieval-topk %d: want at least 1: %w", c.RetrievalTopK, ErrConfig)
	}
	if c.PromptOffset < 0 || c.PromptLimit < 0 {
		return fmt.Errorf("--prompt-offset %d, --prompt-limit %d: want non-negative: %w", c.PromptOffset, c.PromptLimit, ErrConfig)
	}
	if c.PromptsPerShard < 1 {
		return fmt.Errorf("--prompts-per-shard %d: want at least 1: %w", c.PromptsPerShard, ErrConfig)
	}
	if c.MaxBatch < 0 {
		return fmt.Errorf("--max-batch %d: want 0 (all at once) or more: %w", c.MaxBatch, ErrConfig)
	}
	switch {
	case c.Engine != "" && c.Engine != EngineServer:
		return fmt.Errorf("--engine %q: want local or server: %w", c.Engine, ErrConfig)
	case c.Engine == EngineServer && c.EngineURL == "":
		return fmt.Errorf("--engine server needs --engine-url (http://host:port of an OpenAI-compatible completions server): %w", ErrConfig)
	case c.Engine == "" && (c.EngineURL != "" || c.EngineModel != ""):
		return fmt.Errorf("--engine-url and --engine-model are for --engine server: %w", ErrConfig)
	case c.EngineConcurrency < 0:
		return fmt.Errorf("--engine-concurrency %d: want 1 or more: %w", c.EngineConcurrency, ErrConfig)
	}
	if c.Device == "" {
		return fmt.Errorf("--device is empty: want cpu, cuda or cuda:N: %w", ErrConfig)
	}
	if c.Protocol != nil {
		if err := c.Protocol.Validate(); err != nil {
			return fmt.Errorf("--protocol: %w", err)
		}
	}
	return nil
}

// Inputs are what the stage reads besides its config.
type Inputs struct {
	// Prompts is the prompts dataset.
	Prompts string
	// Policy is the checkpoint directory in HF layout, tokenizer.json included.
	Policy string
	// Index is a local BM25 index built by `mempo index`; used when Config.RetrieverURL
	// is empty. Exactly one of the two must be set.
	Index string
	// Client tunes the HTTP client of Config.RetrieverURL (timeouts, retries); its URL
	// field is ignored.
	Client search.ClientConfig
	// Engine tunes the HTTP client of Config.EngineURL (timeout, retries).
	Engine EngineClient
}

// selectPrompts applies PromptOffset and PromptLimit to the uid-sorted prompts and
// returns the selection sorted by uid again.
func (c Config) selectPrompts(sorted []format.Prompt) []format.Prompt {
	if c.PromptLimit == 0 {
		return sorted
	}
	seen := make(map[int]bool, c.PromptLimit)
	var out []format.Prompt
	for i := range c.PromptLimit {
		j := (c.PromptOffset + i) % len(sorted)
		if seen[j] {
			break // the limit exceeds the dataset: each prompt once
		}
		seen[j] = true
		out = append(out, sorted[j])
	}
	slices.SortStableFunc(out, func(a, b format.Prompt) int { return cmp.Compare(a.UID, b.UID) })
	return out
}
