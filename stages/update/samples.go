package update

import (
	"encoding/json"
	"fmt"
	"math"

	"github.com/mempo/mempo/format"
	"github.com/mempo/mempo/model/qwen2"
	"github.com/mempo/mempo/train"
)

// Sample is one training sample: one turn of one trajectory. Its pruned context is the
// prompt and its generated tokens the response, exactly what the policy saw and
// produced (DESIGN.md §7); prompt and observation tokens carry no loss.
type Sample struct {
	UID          string
	Sample, Turn int32
	train.Sequence
}

type turnKey struct {
	uid          string
	sample, turn int32
}

func (k turnKey) String() string {
	return fmt.Sprintf("uid %s sample %d turn %d", k.uid, k.sample, k.turn)
}

// located is a row with the file and row index it came from, for error messages.
type located[R any] struct {
	row  R
	path string
	idx  int
	used bool
}

// readKeyed reads every shard of the dataset in dir and indexes its rows by turn; a
// turn listed twice is an error naming both rows.
func readKeyed[R format.Row](name, dir string, key func(*R) turnKey) (map[turnKey]*located[R], error) {
	d, err := format.OpenDataset(dir)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	out := map[turnKey]*located[R]{}
	for i := range d.Len() {
		r, err := format.OpenShard[R](d, i)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		rows, err := format.ReadAll(r)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		for j := range rows {
			k := key(&rows[j])
			if prev, ok := out[k]; ok {
				return nil, fmt.Errorf("%s %s row %d: %s already in %s row %d: %w", name, d.Path(i), j, k, prev.path, prev.idx, ErrInput)
			}
			out[k] = &located[R]{row: rows[j], path: d.Path(i), idx: j}
		}
	}
	return out, nil
}

// LoadSamples joins the rollouts, logprobs and advantages datasets turn by turn into
// samples, in rollouts order. Every turn must be in all three with one old log-prob,
// one advantage and (when withRef) one reference log-prob per response token, all
// finite; anything else is an error naming the file, row, column and counts. Turns
// without response tokens carry no loss and are left out.
func LoadSamples(rollouts, logprobs, advantages string, withRef bool) ([]Sample, error) {
	lps, err := readKeyed("logprobs", logprobs, func(r *format.Logprob) turnKey { return turnKey{r.UID, r.Sample, r.Turn} })
	if err != nil {
		return nil, err
	}
	advs, err := readKeyed("advantages", advantages, func(r *format.Advantage) turnKey { return turnKey{r.UID, r.Sample, r.Turn} })
	if err != nil {
		return nil, err
	}
	d, err := format.OpenDataset(rollouts)
	if err != nil {
		return nil, fmt.Errorf("rollouts: %w", err)
	}
	var out []Sample
	seen := map[turnKey]bool{}
	for i := range d.Len() {
		r, err := format.OpenShard[format.Rollout](d, i)
		if err != nil {
			return nil, fmt.Errorf("rollouts: %w", err)
		}
		rows, err := format.ReadAll(r)
		if err != nil {
			return nil, fmt.Errorf("rollouts: %w", err)
		}
		for j := range rows {
			ro := &rows[j]
			k := turnKey{ro.UID, ro.Sample, ro.Turn}
			where := fmt.Sprintf("rollouts %s row %d", d.Path(i), j)
			if seen[k] {
				return nil, fmt.Errorf("%s: %s appears twice: %w", where, k, ErrInput)
			}
			seen[k] = true
			lp, ok := lps[k]
			if !ok {
				return nil, fmt.Errorf("%s: %s has no logprobs row in %s (log-probs of other rollouts?): %w", where, k, logprobs, ErrInput)
			}
			ad, ok := advs[k]
			if !ok {
				return nil, fmt.Errorf("%s: %s has no advantages row in %s (advantages of other rollouts?): %w", where, k, advantages, ErrInput)
			}
			lp.used, ad.used = true, true
			n := len(ro.ResponseIDs)
			cols := []struct {
				kind, col string
				at        string
				v         []float32
				need      bool
			}{
				{"logprobs", "old_logprobs", fmt.Sprintf("%s row %d", lp.path, lp.idx), lp.row.OldLogprobs, true},
				{"logprobs", "ref_logprobs", fmt.Sprintf("%s row %d", lp.path, lp.idx), lp.row.RefLogprobs, withRef},
				{"advantages", "advantages", fmt.Sprintf("%s row %d", ad.path, ad.idx), ad.row.Advantages, true},
			}
			for _, c := range cols {
				if !c.need {
					continue
				}
				if len(c.v) != n {
					return nil, fmt.Errorf("%s %s: %s: column %q: %d values, want %d (response_ids of %s): %s whose token counts do not match the rollouts: %w",
						c.kind, c.at, k, c.col, len(c.v), n, where, c.kind, ErrInput)
				}
				for t, x := range c.v {
					if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
						return nil, fmt.Errorf("%s %s: %s: column %q: value %d is %v, want finite: %w", c.kind, c.at, k, c.col, t, x, ErrInput)
					}
					if c.kind == "logprobs" && x > 0 {
						return nil, fmt.Errorf("%s %s: %s: column %q: value %d is %v, want a log-probability <= 0: %w", c.kind, c.at, k, c.col, t, x, ErrInput)
					}
				}
			}
			if n == 0 {
				continue
			}
			if len(ro.PromptIDs) == 0 {
				return nil, fmt.Errorf("%s: %s: empty prompt_ids: the first response token needs a context: %w", where, k, ErrInput)
			}
			s := Sample{UID: ro.UID, Sample: ro.Sample, Turn: ro.Turn, Sequence: train.Sequence{
				Context: qwen2.Tokens(ro.PromptIDs), Response: qwen2.Tokens(ro.ResponseIDs),
				Old: lp.row.OldLogprobs, Adv: ad.row.Advantages}}
			if withRef {
				s.Ref = lp.row.RefLogprobs
			}
			out = append(out, s)
		}
	}
	for _, extra := range []struct {
		name string
		keys func() (turnKey, string, int, bool)
	}{
		{"logprobs", firstUnused(lps)}, {"advantages", firstUnused(advs)},
	} {
		if k, path, idx, ok := extra.keys(); ok {
			return nil, fmt.Errorf("%s %s row %d: %s is not a turn of the rollouts %s: %w", extra.name, path, idx, k, rollouts, ErrInput)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("rollouts %s: no turn with response tokens to train on: %w", rollouts, ErrInput)
	}
	return out, nil
}

// firstUnused finds a row no rollout turn claimed, the first by file and row.
func firstUnused[R any](m map[turnKey]*located[R]) func() (turnKey, string, int, bool) {
	return func() (turnKey, string, int, bool) {
		var best *located[R]
		var bk turnKey
		for k, l := range m {
			if !l.used && (best == nil || l.path < best.path || (l.path == best.path && l.idx < best.idx)) {
				best, bk = l, k
			}
		}
		if best == nil {
			return turnKey{}, "", 0, false
		}
		return bk, best.path, best.idx, true
	}
}

// sameTemperature checks that the log-probs dataset was scored at temperature t: old
// log-probs at another temperature would make every ratio wrong from the first step.
func sameTemperature(logprobs string, t float64) error {
	m, err := format.ReadManifest(logprobs)
	if err != nil {
		return fmt.Errorf("logprobs: %w", err)
	}
	var c struct {
		Temperature *float64 `json:"temperature"`
	}
	if len(m.Config) == 0 {
		return nil // written without a stage config (an import): nothing to check
	}
	if err := json.Unmarshal(m.Config, &c); err != nil {
		return fmt.Errorf("logprobs %s: config: %w: %w", logprobs, err, ErrInput)
	}
	if c.Temperature != nil && *c.Temperature != t {
		return fmt.Errorf("logprobs %s were scored at temperature %v, the update runs at %v; pass the rollout's --temperature to both mempo-logprob and mempo-update: %w",
			logprobs, *c.Temperature, t, ErrInput)
	}
	return nil
}
