// Package eval turns evaluation runs — rollouts on a test set and their scores — into
// the figures MemPO is judged by (DESIGN.md §7–§8): F1, EM, success rate, total and peak
// tokens (TT, PT), turns, invalid-action rate, and how many found facts the final memory
// still holds; as Markdown and CSV tables and as PNG plots. Figures are computed per
// question first, so that runs of several training seeds on one test set can be pooled
// and bootstrapped over seeds and questions (Report).
package eval

import (
	"math"
	"slices"
	"strings"

	"github.com/mempo/mempo/agent/task"
	"github.com/mempo/mempo/format"
)

// Run names one evaluation: a policy (Label) on a test set of K objectives, with the
// directories of its rollouts and scores.
type Run struct {
	Label    string
	K        int
	Rollouts string
	Scores   string
}

// Row is one Run's figures: means over its trajectories.
type Row struct {
	Label      string  `json:"label"`
	K          int     `json:"k"`
	N          int     `json:"n"`            // trajectories
	F1         float64 `json:"f1"`           // mean token F1 over objectives
	EM         float64 `json:"em"`           // mean fraction of objectives exactly matched
	Success    float64 `json:"success"`      // fraction with every objective matched and a valid format
	TT         float64 `json:"tt"`           // mean total tokens over all calls
	PT         float64 `json:"pt"`           // mean peak single-call tokens
	Turns      float64 `json:"turns"`        // mean turns
	Invalid    float64 `json:"invalid_rate"` // invalid turns / turns
	Retention  float64 `json:"retention"`    // found facts still in the final <mem> / found facts; -1 when unknown
	FactsFound int     `json:"facts_found"`
}

// Facts gives the facts behind a question, for the retention figure; nil when the
// prompts are not from the synthetic task.
type Facts func(uid string) []task.Hop

// TaskFacts indexes the facts of every question of a task world by uid.
func TaskFacts(w *task.World) Facts {
	facts := map[string][]task.Hop{}
	for _, p := range append(slices.Clip(w.Train), w.Test...) {
		facts[p.UID] = p.Facts()
	}
	return func(uid string) []task.Hop { return facts[uid] }
}

// Summarize computes the Row of one Run: the per-question figures (Questions) pooled
// over its questions. With the same number of trajectories per question — what eval
// writes — this is the plain mean over trajectories, and for the rates the ratio of the
// sums over trajectories.
func Summarize(r Run, facts Facts) (Row, error) {
	row := Row{Label: r.Label, K: r.K, Retention: -1}
	qs, err := Questions(r, facts)
	if err != nil {
		return row, err
	}
	for _, q := range qs {
		row.N += q.Trajectories
		row.FactsFound += q.FactsFound
	}
	row.F1, row.EM, row.Success = Pool(qs, F1), Pool(qs, EM), Pool(qs, Success)
	row.TT, row.PT, row.Turns = Pool(qs, TT), Pool(qs, PT), Pool(qs, Turns)
	if v := Pool(qs, Invalid); !math.IsNaN(v) {
		row.Invalid = v
	}
	if v := Pool(qs, Retention); !math.IsNaN(v) {
		row.Retention = v
	}
	return row, nil
}

// finalMemory is the last memory the trajectory wrote.
func finalMemory(tr []format.Rollout) string {
	for i := len(tr) - 1; i >= 0; i-- {
		if strings.TrimSpace(tr[i].Memory) != "" {
			return tr[i].Memory
		}
	}
	return ""
}

func mean32(xs []float32) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := 0.0
	for _, x := range xs {
		s += float64(x)
	}
	return s / float64(len(xs))
}

func allOne(xs []float32) bool {
	for _, x := range xs {
		if x != 1 {
			return false
		}
	}
	return len(xs) > 0
}
