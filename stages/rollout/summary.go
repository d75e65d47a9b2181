package rollout

import (
	"fmt"
	"path/filepath"

	"github.com/mempo/mempo/agent/protocol"
	"github.com/mempo/mempo/format"
)

// Stats are the figures of a set of trajectories that the manifest reports: how they
// ended and what they cost in tokens (TT and PT as the paper defines them).
type Stats struct {
	Trajectories int
	Turns        int
	Answered     int // trajectories whose last turn answers
	MaxTurns     int // trajectories ended by the turn budget
	LengthTurns  int // turns cut by --max-new-tokens without a complete action
	Invalid      int // turns without a valid action
	Response     int64
	TT           int64 // sum over trajectories of their total tokens
	PT           int64 // sum over trajectories of their peak single-call tokens
	PeakPT       int   // the largest PT
}

// Add folds one trajectory's rows (turns 0, 1, … of one (uid, sample)) into s.
func (s *Stats) Add(rows []format.Rollout) {
	s.Trajectories++
	s.Turns += len(rows)
	pt := 0
	for _, r := range rows {
		call := len(r.PromptIDs) + len(r.ResponseIDs)
		s.TT += int64(call)
		s.Response += int64(len(r.ResponseIDs))
		pt = max(pt, call)
		if r.Finish == string(protocol.Length) {
			s.LengthTurns++
		}
		if r.Action == string(protocol.Invalid) {
			s.Invalid++
		}
	}
	s.PT += int64(pt)
	s.PeakPT = max(s.PeakPT, pt)
	switch last := rows[len(rows)-1]; {
	case last.Action == string(protocol.Answer):
		s.Answered++
	case last.Finish == string(protocol.MaxTurns):
		s.MaxTurns++
	}
}

// Metrics are the manifest figures of s; means are per trajectory.
func (s Stats) Metrics() map[string]float64 {
	n := float64(max(s.Trajectories, 1))
	return map[string]float64{
		"trajectories":        float64(s.Trajectories),
		"turns_mean":          float64(s.Turns) / n,
		"answered_frac":       float64(s.Answered) / n,
		"max_turns_frac":      float64(s.MaxTurns) / n,
		"length_turns":        float64(s.LengthTurns),
		"invalid_turns":       float64(s.Invalid),
		"response_tokens_sum": float64(s.Response),
		"tt_mean":             float64(s.TT) / n,
		"pt_mean":             float64(s.PT) / n,
		"pt_max":              float64(s.PeakPT),
	}
}

// summarize is the stage's jobs.Spec.Summarize: Stats over the finished shards, read
// back from the files, so a resumed run reports what an uninterrupted one does.
func summarize(dir string, outputs []format.Output) (map[string]float64, error) {
	var s Stats
	for _, o := range outputs {
		path := filepath.Join(dir, o.File)
		r, err := format.OpenFile[format.Rollout](path)
		if err != nil {
			return nil, err
		}
		rows, err := format.ReadAll(r)
		r.Close()
		if err != nil {
			return nil, err
		}
		trajs, err := format.Trajectories(rows)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		for _, t := range trajs {
			s.Add(t)
		}
	}
	return s.Metrics(), nil
}
