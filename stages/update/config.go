// Package update is the update stage of a MemPO iteration (DESIGN.md §7): it trains the
// policy checkpoint on the turns of a rollouts dataset with their old and reference
// log-probs and their advantages — PPO clipped surrogate with dual clip, KL to the
// reference, optional entropy bonus — in mini-batches split into micro-batches by a
// token budget with exact gradient accumulation, one AdamW step per mini-batch, and
// writes the next checkpoint artifact with its optimizer and trainer state. A killed
// update resumes from its last finished mini-batch and ends with the same weights.
package update

import (
	"errors"
	"fmt"
	"math"

	"github.com/mempo/mempo/train"
)

// Stage is the update stage's name in cache keys and commit records.
const Stage = "update"

var (
	// ErrConfig marks an invalid setting. It is the objective's and the optimizer's
	// sentinel too, so errors.Is(err, ErrConfig) holds for every error Validate returns.
	ErrConfig = train.ErrConfig
	// ErrInput marks inputs that cannot be trained on: rows that do not match across the
	// datasets, a reference of another model, a sequence longer than the model's context.
	ErrInput = train.ErrInput
	// ErrPolicy marks log-probs (and the rollouts they score) made by another policy
	// than --policy; it comes wrapped with ErrInput.
	ErrPolicy = errors.New("rollouts and log-probs from different policies")
	// ErrReference marks log-probs scored against another reference than --ref; it
	// comes wrapped with ErrInput.
	ErrReference = errors.New("log-probs of another reference")
)

// Config is the update stage's configuration; its canonical JSON is keyed and stored
// in trainer_state.json.
type Config struct {
	// Objective is the loss: clip range, dual clip, KL estimator and coefficient,
	// entropy coefficient, aggregation.
	Objective train.Objective `json:"objective"`
	// AdamW is the optimizer: LR, betas, eps, weight decay, warm-up, grad-norm clip.
	AdamW train.AdamWConfig `json:"adamw"`
	// PPOEpochs passes over the samples, each reshuffled.
	PPOEpochs int `json:"ppo_epochs"`
	// MiniBatches per epoch: one optimizer step each.
	MiniBatches int `json:"mini_batches"`
	// MicroTokenBudget bounds rows × padded width (context + response) of one
	// forward/backward pass; a longer sample gets a micro-batch of its own. 0 puts each
	// mini-batch in one pass. It changes the summation order, so it is keyed.
	MicroTokenBudget int `json:"micro_token_budget"`
	// Temperature divides the policy's logits, as the rollout sampled and the log-prob
	// stage scored (verl scores the actor at the rollout temperature); the log-probs
	// must have been computed at the same temperature.
	Temperature float64 `json:"temperature"`
	// Runtime is the device, precision, passes and processes it trains with; its
	// fields are the config's own in JSON.
	train.Runtime
}

// DefaultConfig is the paper's setting (DESIGN.md §7): verl's objective, AdamW at LR
// 1e-6, one PPO epoch, four mini-batches, on the CPU.
func DefaultConfig() Config {
	return Config{
		Objective:        train.DefaultObjective,
		AdamW:            train.DefaultAdamW,
		PPOEpochs:        1,
		MiniBatches:      4,
		MicroTokenBudget: 8192,
		Temperature:      1,
		Runtime:          train.DefaultRuntime,
	}
}

// Validate names the first bad setting by its flag.
func (c Config) Validate() error {
	if err := c.Objective.Validate(); err != nil {
		return err
	}
	if err := c.AdamW.Validate(); err != nil {
		return err
	}
	switch {
	case c.PPOEpochs < 1:
		return fmt.Errorf("--ppo-epochs %d: want at least 1: %w", c.PPOEpochs, ErrConfig)
	case c.MiniBatches < 1:
		return fmt.Errorf("--mini-batches %d: want at least 1: %w", c.MiniBatches, ErrConfig)
	case c.MicroTokenBudget < 0:
		return fmt.Errorf("--micro-token-budget %d: want >= 0 (0: one pass per mini-batch): %w", c.MicroTokenBudget, ErrConfig)
	case !(c.Temperature > 0) || math.IsInf(c.Temperature, 0):
		return fmt.Errorf("--temperature %v: want > 0: %w", c.Temperature, ErrConfig)
	}
	return c.Runtime.Check(ErrConfig)
}
