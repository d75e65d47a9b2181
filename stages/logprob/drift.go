package logprob

import (
	"fmt"
	"log/slog"
	"math"

	"github.com/mempo/mempo/format"
)

// DriftWarn is the largest gap, in nats, between a token's sampling log-prob and its
// old log-prob that the stage accepts without a warning. Both are the same policy's
// log softmax(logits/T) of the same token, one from the decode loop (or an inference
// server) and one from the scoring pass, so they differ only by rounding: within 1e-4
// in float32 (TestRunOldMatchesSampling) and 0.055 in bfloat16 (a trained tiny policy,
// 825 greedy evaluation turns). A gap of a nat or more means the two did not compute
// the same distribution: another checkpoint or temperature, a server that samples
// differently, or a broken kernel.
const DriftWarn = 1.0

// drift accumulates |sampling − old| over the tokens of the rows it is shown, what
// verl reports as the rollout/actor probability difference. PPO takes the old
// log-probs for the distribution the tokens were drawn from; the drift is how far, in
// log-ratio, that is untrue.
type drift struct{ tokens, sum, max float64 }

// add compares one rollout row with its log-prob row; a row without sampling
// log-probs (ingested trajectories may lack them) counts for nothing.
func (d *drift) add(r *format.Rollout, l *format.Logprob) error {
	if r.UID != l.UID || r.Sample != l.Sample || r.Turn != l.Turn {
		return fmt.Errorf("rollout row %s/%d/%d beside log-prob row %s/%d/%d", r.UID, r.Sample, r.Turn, l.UID, l.Sample, l.Turn)
	}
	switch len(r.SamplingLogprobs) {
	case 0: // ingested without them
		return nil
	case len(l.OldLogprobs):
	default:
		return fmt.Errorf("uid %s sample %d turn %d: %d sampling log-probs for %d old ones", r.UID, r.Sample, r.Turn, len(r.SamplingLogprobs), len(l.OldLogprobs))
	}
	for i, s := range r.SamplingLogprobs {
		gap := math.Abs(float64(s) - float64(l.OldLogprobs[i]))
		d.tokens++
		d.sum += gap
		d.max = max(d.max, gap)
	}
	return nil
}

// warnDrift logs a warning when a summary's largest drift passes DriftWarn.
func warnDrift(log *slog.Logger, m map[string]float64) {
	if v, ok := m["sampling_drift_max"]; ok && v > DriftWarn {
		log.Warn("sampling log-probs differ from the old pass's: the rollouts were not drawn from the distribution PPO takes them from (another checkpoint or temperature, or a kernel computed one of the two wrongly)",
			"sampling_drift_max", v, "sampling_drift_mean", m["sampling_drift_mean"], "threshold", DriftWarn)
	}
}

// figures are the summary's entries: the mean and largest gap per token.
func (d *drift) figures(out map[string]float64) {
	if d.tokens > 0 {
		out["sampling_drift_mean"] = d.sum / d.tokens
		out["sampling_drift_max"] = d.max
	}
}

// readShard reads shard i of the rollouts whole.
func readShard(rolls *format.Dataset, i int) ([]format.Rollout, error) {
	rd, err := format.OpenShard[format.Rollout](rolls, i)
	if err != nil {
		return nil, err
	}
	return format.ReadAll(rd)
}
