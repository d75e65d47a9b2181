// Package sft is the warm start of DESIGN.md §8: behaviour cloning of the scripted
// oracle. The oracle plays the task's questions against the same search index the
// rollouts use, each trajectory is replayed through protocol.Episode with the policy's
// tokenizer so every turn's (context, response) ids are exactly what a rollout would
// see and produce, and the policy is trained on the mean NLL of the response tokens
// (context tokens carry no loss unless Config.ContextLossWeight says so), with AdamW,
// a warm-up then constant or linearly decaying LR, for some epochs; the held-out NLL
// of the response tokens is reported before and after. The output is a checkpoint
// artifact like the update stage's, plus oracle.jsonl, the trajectories cloned.
package sft

import (
	"errors"
	"fmt"
	"math"

	"github.com/mempo/mempo/agent/protocol"
	"github.com/mempo/mempo/train"
)

// Stage is the SFT stage's name in cache keys and trainer states.
const Stage = "sft"

// OracleFile holds the oracle's trajectories in the checkpoint, one JSON per line.
const OracleFile = "oracle.jsonl"

var (
	// ErrConfig marks an invalid setting; the message names the flag.
	ErrConfig = errors.New("bad sft config")
	// ErrInput marks inputs SFT cannot use: a prompt not of the task's world, a turn
	// longer than the model's context, a tokenizer the model cannot embed.
	ErrInput = errors.New("bad sft input")
)

// Schedule is the LR schedule after warm-up.
type Schedule string

const (
	Constant Schedule = "constant"
	Linear   Schedule = "linear" // linear decay to 0 at the last step
)

// Config is the SFT stage's configuration; its canonical JSON is keyed and stored.
type Config struct {
	// Context and MaxTurns are the episode settings the rollouts will use; the oracle
	// plays within MaxTurns and its contexts are built by Context.
	Context  protocol.ContextPolicy `json:"context"`
	MaxTurns int                    `json:"max_turns"`
	// Protocol is the turn format; nil is protocol.Default().
	Protocol *protocol.Protocol `json:"protocol,omitempty"`
	// OracleDrop and OracleDistractor are the oracle's imperfections (task.OracleConfig).
	OracleDrop       float64 `json:"oracle_drop"`
	OracleDistractor float64 `json:"oracle_distractor"`
	// RetrievalTopK documents per search, as the rollouts retrieve.
	RetrievalTopK int `json:"retrieval_topk"`
	// Questions caps the prompts cloned (the first ones of the dataset); 0 takes all.
	Questions int `json:"questions"`
	// HeldOut is the fraction of trajectories kept out of training to measure the loss.
	HeldOut float64 `json:"held_out"`
	Epochs  int     `json:"epochs"`
	// AdamW holds LR, betas, weight decay, warm-up steps and the grad-norm clip.
	AdamW    train.AdamWConfig `json:"adamw"`
	Schedule Schedule          `json:"schedule"`
	// BatchTokens bounds rows × padded width of one optimizer step's batch.
	BatchTokens int `json:"batch_tokens"`
	// ContextLossWeight weighs the NLL of context tokens (prompt, earlier turns,
	// observations) against the response's weight of 1; 0, the default, trains on the
	// response only, as verl's SFT. A tiny model trained from scratch has no language
	// model to start from: a small weight lets it learn the corpus and copying from
	// context on every token it reads, not only on the few it writes.
	ContextLossWeight float64 `json:"context_loss_weight"`
	// ChatTemplate says what renders the first context of an episode: "" or
	// "checkpoint", the policy's own Jinja chat template (tokenizer_config.json; the
	// protocol's chat glue, with a warning, when it has none), or "protocol", always the
	// protocol's glue. Keyed: it changes the prompts.
	ChatTemplate string `json:"chat_template,omitempty"`
	// Runtime is the device, precision, passes and processes it trains with; its
	// fields are the config's own in JSON.
	train.Runtime
}

// DefaultConfig clones the demo's oracle (it forgets a fact with probability 0.2 and
// keeps a distractor with 0.1) for 3 epochs at a constant LR of 1e-3 without warm-up,
// which suits the tiny model; real models want a smaller LR and a warm-up.
func DefaultConfig() Config {
	a := train.DefaultAdamW
	a.LR = 1e-3
	return Config{
		Context: protocol.Mempo, MaxTurns: 16, OracleDrop: 0.2, OracleDistractor: 0.1,
		RetrievalTopK: 3, HeldOut: 0.1, Epochs: 3, AdamW: a, Schedule: Constant,
		BatchTokens: 16384, Runtime: train.DefaultRuntime,
	}
}

// shares reports whether the passes share prefixes (train.TreePass).
func (c Config) shares() bool { return train.TreePass(c.SharePrefixes, c.GradCheckpoint) }

// Validate names the first bad setting by its flag.
func (c Config) Validate() error {
	if _, err := protocol.ParseContextPolicy(string(c.Context)); err != nil {
		return fmt.Errorf("%w: %w", err, ErrConfig)
	}
	if err := c.AdamW.Validate(); err != nil {
		return err
	}
	prob := func(v float64) bool { return v >= 0 && v <= 1 }
	switch {
	case c.MaxTurns < 1:
		return fmt.Errorf("--max-turns %d: want at least 1: %w", c.MaxTurns, ErrConfig)
	case !prob(c.OracleDrop):
		return fmt.Errorf("--oracle-drop %v: want a probability in [0,1]: %w", c.OracleDrop, ErrConfig)
	case !prob(c.OracleDistractor):
		return fmt.Errorf("--oracle-distractor %v: want a probability in [0,1]: %w", c.OracleDistractor, ErrConfig)
	case c.RetrievalTopK < 1:
		return fmt.Errorf("--retrieval-topk %d: want at least 1: %w", c.RetrievalTopK, ErrConfig)
	case c.Questions < 0:
		return fmt.Errorf("--questions %d: want >= 0 (0: all): %w", c.Questions, ErrConfig)
	case !(c.HeldOut >= 0 && c.HeldOut < 1) || math.IsNaN(c.HeldOut):
		return fmt.Errorf("--held-out %v: want a fraction in [0, 1): %w", c.HeldOut, ErrConfig)
	case c.Epochs < 1:
		return fmt.Errorf("--epochs %d: want at least 1: %w", c.Epochs, ErrConfig)
	case c.Schedule != Constant && c.Schedule != Linear:
		return fmt.Errorf("--schedule %q: want constant or linear: %w", c.Schedule, ErrConfig)
	case c.BatchTokens < 1:
		return fmt.Errorf("--batch-tokens %d: want at least 1: %w", c.BatchTokens, ErrConfig)
	case !(c.ContextLossWeight >= 0 && c.ContextLossWeight <= train.MaxCoef):
		return fmt.Errorf("--context-loss-weight %v: want a number in [0, %g]: %w", c.ContextLossWeight, train.MaxCoef, ErrConfig)
	}
	return c.Runtime.Check(ErrConfig)
}

// lrAt is the LR of optimizer step k (from 1) of total: linear warm-up from 0 over
// WarmupSteps as train.AdamWConfig.LRAt, then constant, or linear decay to 0 at total
// (HF's get_linear_schedule_with_warmup).
func (c Config) lrAt(k, total int64) float64 {
	w := c.AdamW.WarmupSteps
	if k-1 < w {
		return c.AdamW.LR * float64(k-1) / float64(w)
	}
	if c.Schedule == Linear && total > w {
		return c.AdamW.LR * max(0, float64(total-(k-1))/float64(total-w))
	}
	return c.AdamW.LR
}
