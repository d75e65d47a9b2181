package eval

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/mempo/mempo/agent/protocol"
	"github.com/mempo/mempo/agent/task"
	"github.com/mempo/mempo/format"
)

// Metric is one figure of the results table.
type Metric int

// The metrics, in table order.
const (
	F1        Metric = iota // mean token F1 over objectives
	EM                      // mean fraction of objectives exactly matched
	Success                 // fraction with every objective matched and a valid format
	TT                      // total tokens over all calls
	PT                      // peak single-call tokens
	Turns                   // turns taken
	Invalid                 // invalid turns / turns
	Retention               // found facts still in the final <mem> / found facts
	NumMetrics
)

var metricInfo = [NumMetrics]struct {
	name, header string
	decimals     int
}{
	F1:        {"f1", "F1", 3},
	EM:        {"em", "EM", 3},
	Success:   {"success", "success", 3},
	TT:        {"tt", "TT", 0},
	PT:        {"pt", "PT", 0},
	Turns:     {"turns", "turns", 2},
	Invalid:   {"invalid", "invalid", 3},
	Retention: {"retention", "retention", 3},
}

// String is the metric's name in results.csv.
func (m Metric) String() string { return metricInfo[m].name }

// Ratio is a metric's numerator and denominator on one question. A metric over a set of
// questions is the ratio of the sums, so the rates (invalid turns / turns, kept / found
// facts) weigh every turn and every fact alike, as they did before the questions were
// the unit; a plain mean has denominator 1 per question.
type Ratio struct{ Num, Den float64 }

// Value is Num/Den, NaN when Den is 0 (no turns, no facts found: the rate is unknown).
func (r Ratio) Value() float64 {
	if r.Den == 0 {
		return math.NaN()
	}
	return r.Num / r.Den
}

// Question is one question's figures on one Run: each numerator and denominator is the
// mean over the question's trajectories (several when eval ran with --n > 1), so every
// question weighs the same in a mean over questions.
type Question struct {
	UID          string
	Trajectories int
	FactsFound   int // found facts summed over the trajectories
	Values       [NumMetrics]Ratio
}

// tally sums one uid's trajectories.
type tally struct {
	scored, rolled int
	sum            [Turns + 1]float64 // F1 … Turns from the scores
	turns, invalid int                // from the rollouts
	found, kept    int
}

// Questions computes the per-question figures of a Run, sorted by uid. Every uid must
// have as many trajectories in the rollouts as in the scores.
func Questions(r Run, facts Facts) ([]Question, error) {
	scores, err := format.ReadDataset[format.Score](r.Scores)
	if err != nil {
		return nil, fmt.Errorf("eval %s K=%d: %w", r.Label, r.K, err)
	}
	if len(scores) == 0 {
		return nil, fmt.Errorf("eval %s K=%d: %s has no scores", r.Label, r.K, r.Scores)
	}
	byUID := map[string]*tally{}
	for _, s := range scores {
		t := byUID[s.UID]
		if t == nil {
			t = &tally{}
			byUID[s.UID] = t
		}
		t.scored++
		t.sum[F1] += mean32(s.F1)
		t.sum[EM] += mean32(s.EM)
		if s.FormatOK && s.Reward == 1 && allOne(s.EM) {
			t.sum[Success]++
		}
		t.sum[TT] += float64(s.TT)
		t.sum[PT] += float64(s.PT)
		t.sum[Turns] += float64(s.Turns)
	}

	rolls, err := format.ReadDataset[format.Rollout](r.Rollouts)
	if err != nil {
		return nil, fmt.Errorf("eval %s K=%d: %w", r.Label, r.K, err)
	}
	trajs, err := format.Trajectories(rolls)
	if err != nil {
		return nil, fmt.Errorf("eval %s: %w", r.Rollouts, err)
	}
	for _, tr := range trajs {
		uid := tr[0].UID
		t := byUID[uid]
		if t == nil {
			return nil, fmt.Errorf("eval %s: uid %s has rollouts but no scores in %s", r.Rollouts, uid, r.Scores)
		}
		t.rolled++
		var obs []string
		for _, turn := range tr {
			t.turns++
			if turn.Action == string(protocol.Invalid) {
				t.invalid++
			}
			if turn.Observation != "" {
				obs = append(obs, turn.Observation)
			}
		}
		if facts != nil {
			f, k := task.Retention(facts(uid), obs, finalMemory(tr))
			t.found += f
			t.kept += k
		}
	}

	out := make([]Question, 0, len(byUID))
	for uid, t := range byUID {
		if t.rolled != t.scored {
			return nil, fmt.Errorf("eval %s: uid %s: %d trajectories, %s has %d", r.Rollouts, uid, t.rolled, r.Scores, t.scored)
		}
		q := Question{UID: uid, Trajectories: t.scored, FactsFound: t.found}
		n := float64(t.scored)
		for m := F1; m <= Turns; m++ {
			q.Values[m] = Ratio{t.sum[m] / n, 1}
		}
		q.Values[Invalid] = Ratio{float64(t.invalid) / n, float64(t.turns) / n}
		q.Values[Retention] = Ratio{float64(t.kept) / n, float64(t.found) / n}
		out = append(out, q)
	}
	slices.SortFunc(out, func(a, b Question) int { return strings.Compare(a.UID, b.UID) })
	return out, nil
}

// Pool is a metric over a set of questions: the ratio of the summed numerators and
// denominators.
func Pool(qs []Question, m Metric) float64 {
	var s Ratio
	for _, q := range qs {
		s.Num += q.Values[m].Num
		s.Den += q.Values[m].Den
	}
	return s.Value()
}
