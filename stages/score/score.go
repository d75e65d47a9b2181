// Package score computes the outcome of each trajectory (DESIGN.md §7): the answer taken
// from the last <answer> of the final turn, Search-R1/SQuAD normalisation, exact match and
// token F1 per objective against alias lists, format validity, the outcome reward (on exact
// or Search-R1's substring match), and the cost figures TT, PT and turns. This file is
// pure Go over plain structs; run.go is the stage loop that reads rollouts and writes the
// scores dataset.
package score

import (
	"errors"
	"fmt"
	"strings"
)

// ErrInput marks a trajectory or gold list the scorer cannot score.
var ErrInput = errors.New("bad score input")

// ErrConfig marks an invalid score configuration.
var ErrConfig = errors.New("bad score config")

// Reward selects the outcome reward.
type Reward string

const (
	// RewardEMAll is MemPO's reward: 1 when the format is valid and every objective is an
	// exact match, else 0.
	RewardEMAll Reward = "em-all"
	// RewardEMMean is MEM1-like: the fraction of objectives that match, 0 when the format
	// is invalid.
	RewardEMMean Reward = "em-mean"
	// RewardSubEMAll is em-all with Search-R1's substring match (SubstringMatch) in place
	// of exact match: 1 when the format is valid and every objective's answer contains a
	// gold alias, else 0.
	RewardSubEMAll Reward = "subem-all"
	// RewardSubEMMean is em-mean with the substring match: the fraction of objectives
	// whose answer contains a gold alias, 0 when the format is invalid.
	RewardSubEMMean Reward = "subem-mean"
)

// ParseReward reads the --reward flag value.
func ParseReward(s string) (Reward, error) {
	switch r := Reward(s); r {
	case RewardEMAll, RewardEMMean, RewardSubEMAll, RewardSubEMMean:
		return r, nil
	}
	return "", fmt.Errorf("--reward %q: want em-all, em-mean, subem-all or subem-mean: %w", s, ErrConfig)
}

// Config is the score stage's configuration.
type Config struct {
	// Reward is the outcome reward: em-all (default), em-mean, or their substring-match
	// variants subem-all and subem-mean.
	Reward Reward `json:"reward"`
	// Tags are the answer delimiters of the agent protocol.
	Tags Tags `json:"tags"`
}

// DefaultConfig is MemPO's setting.
func DefaultConfig() Config {
	return Config{Reward: RewardEMAll, Tags: DefaultTags}
}

// Validate reports the first invalid field.
func (c Config) Validate() error {
	if _, err := ParseReward(string(c.Reward)); err != nil {
		return err
	}
	if c.Tags.Open == "" || c.Tags.Close == "" {
		return fmt.Errorf("answer tags %q…%q: both must be non-empty: %w", c.Tags.Open, c.Tags.Close, ErrConfig)
	}
	if strings.Contains(c.Tags.Close, c.Tags.Open) || strings.Contains(c.Tags.Open, c.Tags.Close) {
		return fmt.Errorf("answer tags %q…%q: one contains the other: %w", c.Tags.Open, c.Tags.Close, ErrConfig)
	}
	return nil
}

// Turn is what the scorer needs from one (prompt, sample, turn) rollout row.
type Turn struct {
	Turn int
	// PromptTokens is the length of the pruned context the policy saw, ResponseTokens the
	// number it generated.
	PromptTokens   int
	ResponseTokens int
	// Text is the decoded response; only the final turn's is read.
	Text string
}

// Trajectory is one sample of one prompt, its turns in increasing Turn order.
type Trajectory struct {
	UID    string
	Sample int
	Turns  []Turn
}

// Result is one row of the scores dataset.
type Result struct {
	UID    string
	Sample int
	// Answer is the stripped content of the final turn's last answer; Answers its split,
	// one per objective present (may be fewer or more than the objectives).
	Answer  string
	Answers []string
	// EM and F1 are per objective, in gold order; a missing answer part scores 0.
	EM []bool
	F1 []float64
	// EMMean and F1Mean average over the objectives, whatever the format.
	EMMean   float64
	F1Mean   float64
	FormatOK bool
	Reward   float64
	// TT is the total of prompt+response tokens over all calls, PT the largest single call.
	TT    int
	PT    int
	Turns int
}

// Score scores one trajectory against golds, one alias list per objective.
func Score(cfg Config, tr Trajectory, golds [][]string) (Result, error) {
	where := fmt.Sprintf("uid %s sample %d", tr.UID, tr.Sample)
	if err := cfg.Validate(); err != nil {
		return Result{}, err
	}
	if len(golds) == 0 {
		return Result{}, fmt.Errorf("%s: no gold objectives: %w", where, ErrInput)
	}
	for k, g := range golds {
		if len(g) == 0 {
			return Result{}, fmt.Errorf("%s: objective %d has no gold alias: %w", where, k, ErrInput)
		}
	}
	if len(tr.Turns) == 0 {
		return Result{}, fmt.Errorf("%s: no turns: %w", where, ErrInput)
	}
	res := Result{UID: tr.UID, Sample: tr.Sample, Turns: len(tr.Turns)}
	for i, t := range tr.Turns {
		if i > 0 && t.Turn <= tr.Turns[i-1].Turn {
			return Result{}, fmt.Errorf("%s: turn %d follows turn %d, want increasing turns: %w",
				where, t.Turn, tr.Turns[i-1].Turn, ErrInput)
		}
		if t.PromptTokens < 0 || t.ResponseTokens < 0 {
			return Result{}, fmt.Errorf("%s turn %d: token counts %d+%d, want non-negative: %w",
				where, t.Turn, t.PromptTokens, t.ResponseTokens, ErrInput)
		}
		call := t.PromptTokens + t.ResponseTokens
		res.TT += call
		res.PT = max(res.PT, call)
	}

	final := tr.Turns[len(tr.Turns)-1].Text
	if ans, ok := cfg.Tags.Extract(final); ok {
		res.Answer = ans
		res.Answers = Split(ans)
	}
	res.FormatOK = cfg.Tags.FormatOK(final, len(golds))
	res.EM = make([]bool, len(golds))
	res.F1 = make([]float64, len(golds))
	// correct counts exact matches, contained substring matches; the latter feed only the
	// subem rewards, and the EM column stays exact match whatever the reward.
	correct, contained := 0, 0
	f1Sum := 0.0
	for k, aliases := range golds {
		if k < len(res.Answers) {
			res.EM[k] = ExactMatch(res.Answers[k], aliases)
			res.F1[k] = F1(res.Answers[k], aliases)
			if SubstringMatch(res.Answers[k], aliases) {
				contained++
			}
		}
		if res.EM[k] {
			correct++
		}
		f1Sum += res.F1[k]
	}
	res.EMMean = float64(correct) / float64(len(golds))
	res.F1Mean = f1Sum / float64(len(golds))
	if res.FormatOK {
		switch cfg.Reward {
		case RewardEMAll:
			if correct == len(golds) {
				res.Reward = 1
			}
		case RewardEMMean:
			res.Reward = res.EMMean
		case RewardSubEMAll:
			if contained == len(golds) {
				res.Reward = 1
			}
		case RewardSubEMMean:
			res.Reward = float64(contained) / float64(len(golds))
		}
	}
	return res, nil
}
