package eval

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
)

// Config is how an evaluation is reported: the bootstrap behind the table's intervals
// and the baseline of its differences (Report), and whether Evaluate reports at all.
type Config struct {
	// Resamples is the number B of bootstrap resamples behind each interval.
	Resamples int `json:"resamples"`
	// Seed seeds the resampling (a PCG per test set), so a report is reproducible.
	Seed int64 `json:"seed"`
	// Baseline is the policy the others are compared with; "" picks "grpo" when the
	// experiment has it, NoBaseline none.
	Baseline string `json:"baseline"`
	// NoReport stops Evaluate after the runs (see Evaluate).
	NoReport bool `json:"no_report,omitempty"`
}

// NoBaseline as Config.Baseline reports no differences.
const NoBaseline = "none"

// DefaultConfig returns the defaults of `mempo eval`: 2000 resamples, seed 1, baseline
// "grpo" when present.
func DefaultConfig() Config { return Config{Resamples: 2000, Seed: 1} }

// Estimate is a point value with its 95% interval; all NaN where the metric is
// undefined (retention without the task's facts, a rate with no turns).
type Estimate struct{ Mean, Lo, Hi float64 }

// Known reports whether the metric is defined.
func (e Estimate) Known() bool { return !math.IsNaN(e.Mean) }

// ExcludesZero reports whether the interval lies wholly above or below zero.
func (e Estimate) ExcludesZero() bool { return e.Lo > 0 || e.Hi < 0 }

// Result is one (policy, test set) line of a Report.
type Result struct {
	Policy    string
	K         int
	Seeds     int // seeds pooled
	Questions int // questions of the test set (the same in every seed)
	Values    [NumMetrics]Estimate
	// Diff is policy − baseline per metric, paired by seed and question; nil for the
	// baseline itself and when there is none.
	Diff *[NumMetrics]Estimate
}

// Report is an experiment's results over seeds and questions.
type Report struct {
	Results   []Result
	Baseline  string   // "" when no differences were taken
	Seeds     []string // seed labels
	Resamples int
	Seed      int64
}

// Report estimates every metric of every (policy, K) run and its difference to the
// baseline. The point value is the metric over all seeds and questions (a ratio of
// sums for the rates). The 95% interval is a percentile bootstrap over both factors:
// each of the B resamples draws the seeds with replacement and, independently, the test
// set's questions with replacement — one question draw shared by every seed and policy,
// since they answered the same questions — and recomputes the metric; the interval is
// the 2.5th and 97.5th percentile of the B values. Seeds and questions are crossed, not
// nested, and resampling rows and columns separately is Owen's pigeonhole bootstrap,
// mildly conservative (Owen 2007, https://doi.org/10.1214/07-AOAS122). With one seed
// only questions are drawn. Differences use the same draws for both policies, so they
// are paired by seed and question.
func (e *Experiment) Report(cfg Config) (*Report, error) {
	if cfg.Resamples < 1 {
		return nil, fmt.Errorf("eval: %d bootstrap resamples, want at least 1", cfg.Resamples)
	}
	base, err := e.baseline(cfg.Baseline)
	if err != nil {
		return nil, err
	}
	rep := &Report{Baseline: base, Seeds: e.seeds, Resamples: cfg.Resamples, Seed: cfg.Seed}
	results := map[runKey]Result{}
	for _, g := range e.groups {
		point, boot := g.resample(cfg)
		bi := slices.Index(g.policies, base)
		for p, name := range g.policies {
			r := Result{Policy: name, K: g.k, Seeds: len(e.seeds), Questions: len(g.uids)}
			for m := range NumMetrics {
				r.Values[m] = estimate(point[p][m], boot[p][m])
			}
			if bi >= 0 && bi != p {
				var d [NumMetrics]Estimate
				for m := range NumMetrics {
					diffs := make([]float64, len(boot[p][m]))
					for b := range diffs {
						diffs[b] = boot[p][m][b] - boot[bi][m][b]
					}
					d[m] = estimate(point[p][m]-point[bi][m], diffs)
				}
				r.Diff = &d
			}
			results[runKey{name, g.k}] = r
		}
	}
	for _, key := range e.order {
		rep.Results = append(rep.Results, results[key])
	}
	return rep, nil
}

// baseline resolves Config.Baseline against the experiment's policies.
func (e *Experiment) baseline(name string) (string, error) {
	var have []string
	for _, key := range e.order {
		if !slices.Contains(have, key.policy) {
			have = append(have, key.policy)
		}
	}
	switch {
	case name == NoBaseline:
		return "", nil
	case name == "" && slices.Contains(have, "grpo"):
		return "grpo", nil
	case name == "":
		return "", nil
	case !slices.Contains(have, name):
		return "", fmt.Errorf("eval: baseline %q: no such policy (have %s): %w", name, strings.Join(have, ", "), ErrMissing)
	}
	return name, nil
}

// resample computes every policy's metrics on the whole group (point) and on
// cfg.Resamples bootstrap resamples (boot[policy][metric][b]).
func (g *group) resample(cfg Config) (point [][NumMetrics]float64, boot [][NumMetrics][]float64) {
	nP, nS, nQ := len(g.policies), len(g.q[0]), len(g.uids)
	seedW, questionW := make([]float64, nS), make([]float64, nQ)
	for i := range seedW {
		seedW[i] = 1
	}
	for i := range questionW {
		questionW[i] = 1
	}
	point = make([][NumMetrics]float64, nP)
	for p := range nP {
		point[p] = g.pooled(p, seedW, questionW)
	}
	boot = make([][NumMetrics][]float64, nP)
	for p := range nP {
		for m := range NumMetrics {
			boot[p][m] = make([]float64, cfg.Resamples)
		}
	}
	// One stream per test set, so a test set's intervals do not depend on which
	// others the report holds.
	rng := rand.New(rand.NewPCG(uint64(cfg.Seed), uint64(g.k)))
	for b := range cfg.Resamples {
		if nS > 1 {
			clear(seedW)
			for range nS {
				seedW[rng.IntN(nS)]++
			}
		}
		clear(questionW)
		for range nQ {
			questionW[rng.IntN(nQ)]++
		}
		for p := range nP {
			v := g.pooled(p, seedW, questionW)
			for m := range NumMetrics {
				boot[p][m][b] = v[m]
			}
		}
	}
	return point, boot
}

// pooled is policy p's metrics over the seeds and questions weighted by how often a
// resample drew them.
func (g *group) pooled(p int, seedW, questionW []float64) [NumMetrics]float64 {
	var sum [NumMetrics]Ratio
	for s, ws := range seedW {
		if ws == 0 {
			continue
		}
		var inner [NumMetrics]Ratio
		qs := g.q[p][s]
		for q, wq := range questionW {
			if wq == 0 {
				continue
			}
			for m := range NumMetrics {
				inner[m].Num += wq * qs[q].Values[m].Num
				inner[m].Den += wq * qs[q].Values[m].Den
			}
		}
		for m := range NumMetrics {
			sum[m].Num += ws * inner[m].Num
			sum[m].Den += ws * inner[m].Den
		}
	}
	var out [NumMetrics]float64
	for m := range NumMetrics {
		out[m] = sum[m].Value()
	}
	return out
}

// estimate is the point value with the 2.5th and 97.5th percentiles of the resampled
// values; resamples where the metric is undefined (a rate whose draw had no turns or no
// facts) are left out.
func estimate(point float64, resampled []float64) Estimate {
	if math.IsNaN(point) {
		return Estimate{math.NaN(), math.NaN(), math.NaN()}
	}
	xs := make([]float64, 0, len(resampled))
	for _, x := range resampled {
		if !math.IsNaN(x) {
			xs = append(xs, x)
		}
	}
	slices.Sort(xs)
	return Estimate{Mean: point, Lo: percentile(xs, 0.025), Hi: percentile(xs, 0.975)}
}

// percentile is the p-quantile of sorted xs, interpolating linearly between order
// statistics (Hyndman & Fan type 7, R's default); NaN for no values.
func percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	h := p * float64(len(xs)-1)
	i := int(math.Floor(h))
	if i+1 >= len(xs) {
		return xs[len(xs)-1]
	}
	return xs[i] + (h-float64(i))*(xs[i+1]-xs[i])
}
