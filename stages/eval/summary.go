// Package eval turns evaluation runs — rollouts on a test set and their scores — into
// the figures MemPO is judged by (DESIGN.md §7–§8): F1, EM, success rate, total and peak
// tokens (TT, PT), turns, invalid-action rate, and how many found facts the final memory
// still holds; as Markdown and CSV tables and as PNG plots.
package eval

import (
	"fmt"
	"slices"
	"strings"

	"github.com/mempo/mempo/format"
	"github.com/mempo/mempo/stages/protocol"
	"github.com/mempo/mempo/stages/task"
)

// Run names one evaluation: a policy (Label) on a test set of K objectives, with the
// directories of its rollouts and scores.
type Run struct {
	Label    string
	K        int
	Rollouts string
	Scores   string
}

// Row is one line of the results table: means over the trajectories of a Run.
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

// Summarize computes the Row of one Run.
func Summarize(r Run, facts Facts) (Row, error) {
	row := Row{Label: r.Label, K: r.K, Retention: -1}
	scores, err := format.ReadDataset[format.Score](r.Scores)
	if err != nil {
		return row, err
	}
	if len(scores) == 0 {
		return row, fmt.Errorf("eval %s K=%d: %s has no scores", r.Label, r.K, r.Scores)
	}
	for _, s := range scores {
		row.N++
		row.F1 += mean32(s.F1)
		row.EM += mean32(s.EM)
		if s.FormatOK && s.Reward == 1 && allOne(s.EM) {
			row.Success++
		}
		row.TT += float64(s.TT)
		row.PT += float64(s.PT)
		row.Turns += float64(s.Turns)
	}
	n := float64(row.N)
	row.F1, row.EM, row.Success, row.TT, row.PT, row.Turns = row.F1/n, row.EM/n, row.Success/n, row.TT/n, row.PT/n, row.Turns/n

	rolls, err := format.ReadDataset[format.Rollout](r.Rollouts)
	if err != nil {
		return row, err
	}
	trajs, err := format.Trajectories(rolls)
	if err != nil {
		return row, fmt.Errorf("eval %s: %w", r.Rollouts, err)
	}
	turns, invalid, found, kept := 0, 0, 0, 0
	for _, tr := range trajs {
		var obs []string
		for _, t := range tr {
			turns++
			if t.Action == string(protocol.Invalid) {
				invalid++
			}
			if t.Observation != "" {
				obs = append(obs, t.Observation)
			}
		}
		if facts != nil {
			f, k := task.Retention(facts(tr[0].UID), obs, finalMemory(tr))
			found += f
			kept += k
		}
	}
	if turns > 0 {
		row.Invalid = float64(invalid) / float64(turns)
	}
	row.FactsFound = found
	if found > 0 {
		row.Retention = float64(kept) / float64(found)
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
