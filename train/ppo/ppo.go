// Package ppo holds the PPO objective's settings (clip range, KL estimator, loss
// aggregation), their parsers, and a float64 host reference of the per-token formulas
// (DESIGN.md §7, following verl's core_algos compute_policy_loss, kl_penalty and agg_loss).
// Pure Go: the tensor objective in train computes the same, and its tests compare against
// these; the update and SFT stages take their settings from here.
package ppo

import (
	"errors"
	"fmt"
	"math"
)

var (
	// ErrConfig marks an invalid objective or optimizer setting; the update stage's
	// ErrConfig is this value, so errors.Is holds for every config error it returns.
	ErrConfig = errors.New("bad update config")
	// ErrInput marks inputs that cannot be trained on (no tokens, mismatched shapes).
	ErrInput = errors.New("bad update input")
)

// Clamps of the log-ratio and of the k3 estimate, as in verl: they keep exp() finite when the
// policies have drifted far apart on a token.
const (
	RatioClamp  = 20.0
	KLDiffClamp = 20.0
	KLClamp     = 10.0
)

// Clip holds the PPO clip range and the dual-clip constant (arXiv 1912.09729).
type Clip struct {
	Low   float64 `json:"clip_low"`
	High  float64 `json:"clip_high"`
	DualC float64 `json:"clip_ratio_c"`
}

// DefaultClip is ε_low = ε_high = 0.2, c = 3.
var DefaultClip = Clip{Low: 0.2, High: 0.2, DualC: 3}

// Ratio is ρ = exp(clamp(logp − logpOld, −20, 20)).
func Ratio(logp, logpOld float64) float64 {
	return math.Exp(clamp(logp-logpOld, -RatioClamp, RatioClamp))
}

// TokenLoss is the policy loss of one token and the events the metrics count.
type TokenLoss struct {
	Loss float64
	// Clipped: the clipped branch won (−A·clip(ρ) > −A·ρ), verl's pg_clipfrac event.
	Clipped bool
	// DualClipped: A < 0 and the dual clip −A·c capped the loss, verl's pg_clipfrac_lower.
	DualClipped bool
	// NegKL is clamp(logp − logpOld, ±20); ppo_kl is the token mean of its negation.
	NegKL float64
}

// PolicyLoss is the PPO clipped surrogate with dual clip for one token (arXiv 1707.06347):
//
//	L_clip = max(−A·ρ, −A·clip(ρ, 1−ε_low, 1+ε_high))
//	L      = min(L_clip, −A·c)   when A < 0,   L_clip otherwise.
func PolicyLoss(adv, logp, logpOld float64, c Clip) TokenLoss {
	negKL := clamp(logp-logpOld, -RatioClamp, RatioClamp)
	ratio := math.Exp(negKL)
	l1 := -adv * ratio
	l2 := -adv * clamp(ratio, 1-c.Low, 1+c.High)
	lclip := math.Max(l1, l2)
	t := TokenLoss{Loss: lclip, Clipped: l2 > l1, NegKL: negKL}
	if adv < 0 {
		l3 := -adv * c.DualC
		t.Loss = math.Min(l3, lclip)
		t.DualClipped = lclip > l3
	}
	return t
}

// KL names a per-token estimator of KL(π‖π_ref) (Schulman, "Approximating KL divergence").
type KL string

const (
	KLK1 KL = "k1" // logp − logp_ref
	KLK2 KL = "k2" // ½ (logp − logp_ref)²
	KLK3 KL = "k3" // low_var_kl: exp(d) − d − 1, d = logp_ref − logp, clamped
)

// ParseKL reads a KL estimator name; verl's spellings kl, mse and low_var_kl are accepted.
func ParseKL(s string) (KL, error) {
	switch s {
	case "k1", "kl":
		return KLK1, nil
	case "k2", "mse":
		return KLK2, nil
	case "k3", "low_var_kl":
		return KLK3, nil
	}
	return "", fmt.Errorf("kl estimator %q: want k1, k2 or k3 (low_var_kl): %w", s, ErrConfig)
}

// Of returns the estimate for one token. k3 clamps d to ±20 and the estimate to ±10.
// k must come from ParseKL or the constants; any other value is a programmer error.
func (k KL) Of(logp, logpRef float64) float64 {
	switch k {
	case KLK1:
		return logp - logpRef
	case KLK2:
		d := logp - logpRef
		return 0.5 * d * d
	case KLK3:
		d := clamp(logpRef-logp, -KLDiffClamp, KLDiffClamp)
		return clamp(math.Exp(d)-d-1, -KLClamp, KLClamp)
	}
	panic(fmt.Sprintf("advantage: unknown KL estimator %q", string(k)))
}

// Agg names how per-token losses of a mini-batch become one number.
type Agg string

const (
	// AggTokenMean divides the sum over every response token of the mini-batch by the
	// mini-batch's token count, so gradient accumulation reproduces the full batch.
	AggTokenMean Agg = "token-mean"
	// AggSeqMeanTokenMean averages each sequence over its tokens, then over sequences.
	AggSeqMeanTokenMean Agg = "seq-mean-token-mean"
	// AggSeqMeanTokenSum sums each sequence over its tokens, then averages over sequences.
	AggSeqMeanTokenSum Agg = "seq-mean-token-sum"
)

// ParseAgg reads a loss aggregation name.
func ParseAgg(s string) (Agg, error) {
	switch a := Agg(s); a {
	case AggTokenMean, AggSeqMeanTokenMean, AggSeqMeanTokenSum:
		return a, nil
	}
	return "", fmt.Errorf("loss aggregation %q: want token-mean, seq-mean-token-mean or seq-mean-token-sum: %w", s, ErrConfig)
}

// Aggregate reduces per-token losses, one slice per sequence (its response tokens only), in
// order. An empty mini-batch, or an empty sequence under seq-mean-token-mean, would divide
// by zero and is an error.
func Aggregate(mode Agg, seqs [][]float64) (float64, error) {
	if len(seqs) == 0 {
		return 0, fmt.Errorf("aggregate %s: no sequences: %w", mode, ErrInput)
	}
	switch mode {
	case AggTokenMean:
		sum, n := 0.0, 0
		for _, s := range seqs {
			for _, x := range s {
				sum += x
			}
			n += len(s)
		}
		if n == 0 {
			return 0, fmt.Errorf("aggregate %s: no tokens: %w", mode, ErrInput)
		}
		return sum / float64(n), nil
	case AggSeqMeanTokenMean, AggSeqMeanTokenSum:
		total := 0.0
		for i, s := range seqs {
			sum := 0.0
			for _, x := range s {
				sum += x
			}
			if mode == AggSeqMeanTokenMean {
				if len(s) == 0 {
					return 0, fmt.Errorf("aggregate %s: sequence %d has no tokens: %w", mode, i, ErrInput)
				}
				sum /= float64(len(s))
			}
			total += sum
		}
		return total / float64(len(seqs)), nil
	}
	return 0, fmt.Errorf("aggregate %q: unknown mode: %w", string(mode), ErrConfig)
}

// PolicyStats are the policy-loss metrics of a mini-batch.
type PolicyStats struct {
	Loss        float64 `json:"pg_loss"`
	ClipFrac    float64 `json:"pg_clipfrac"`
	ClipFracLow float64 `json:"pg_clipfrac_lower"`
	PPOKL       float64 `json:"ppo_kl"`
}

// BatchPolicyLoss computes the aggregated policy loss and its metrics over a mini-batch; adv, logp and
// logpOld hold one slice per sequence, of equal lengths. The fractions and ppo_kl are token
// means whatever mode is, as in verl.
func BatchPolicyLoss(adv, logp, logpOld [][]float64, c Clip, mode Agg) (PolicyStats, error) {
	if len(logp) != len(adv) || len(logpOld) != len(adv) {
		return PolicyStats{}, fmt.Errorf("policy loss: %d/%d/%d sequences of adv/logp/old, want equal: %w",
			len(adv), len(logp), len(logpOld), ErrInput)
	}
	losses := make([][]float64, len(adv))
	clipped, dual, negKL := make([][]float64, len(adv)), make([][]float64, len(adv)), make([][]float64, len(adv))
	for i := range adv {
		if len(logp[i]) != len(adv[i]) || len(logpOld[i]) != len(adv[i]) {
			return PolicyStats{}, fmt.Errorf("policy loss: sequence %d: %d/%d/%d tokens of adv/logp/old, want equal: %w",
				i, len(adv[i]), len(logp[i]), len(logpOld[i]), ErrInput)
		}
		for j := range adv[i] {
			t := PolicyLoss(adv[i][j], logp[i][j], logpOld[i][j], c)
			losses[i] = append(losses[i], t.Loss)
			clipped[i] = append(clipped[i], indicator(t.Clipped))
			dual[i] = append(dual[i], indicator(t.DualClipped))
			negKL[i] = append(negKL[i], -t.NegKL)
		}
	}
	var st PolicyStats
	var err error
	if st.Loss, err = Aggregate(mode, losses); err != nil {
		return PolicyStats{}, err
	}
	// The metrics are token means; they fail only when the batch has no token at all, and
	// then all three fail alike.
	if st.ClipFrac, err = Aggregate(AggTokenMean, clipped); err != nil {
		return PolicyStats{}, err
	}
	st.ClipFracLow, _ = Aggregate(AggTokenMean, dual)
	st.PPOKL, _ = Aggregate(AggTokenMean, negKL)
	return st, nil
}

func indicator(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func clamp(x, lo, hi float64) float64 {
	return math.Max(lo, math.Min(hi, x))
}
