package logprob

import (
	"fmt"
	"path/filepath"

	"github.com/mempo/mempo/format"
	"github.com/mempo/mempo/internal/stats"
)

// memSplit accumulates the memory pass's figures of one class of memories.
type memSplit struct {
	pMem, pFull, rMem []float64 // rMem = P_mem − P_full, the default memory reward
}

// summarize is the stage's jobs.Spec.Summarize: what the memory pass found, read back
// from the finished shards, so the manifest tells at a glance whether memories carry
// the answer without opening a shard. Figures are split by what the memory holds
// (format.Logprob.Holds), and auc_*_all_vs_none says how well P_mem and R^M = P_mem − P_full rank
// memories holding every gold answer above those holding none (0.5 is chance) — whether
// the memory reward measures what MemPO claims it measures. With rolls, the rollouts
// shard i of outputs scored, it also reports the sampling drift (see drift).
func summarize(dir string, outputs []format.Output, rolls *format.Dataset) (map[string]float64, error) {
	var turns, memories, above, sumMem, sumFull, oldTokens, sumOld float64
	var gap drift
	split := map[string]*memSplit{}
	for _, h := range format.HoldsClasses {
		split[h] = &memSplit{}
	}
	for i, o := range outputs {
		path := filepath.Join(dir, o.File)
		r, err := format.OpenFile[format.Logprob](path)
		if err != nil {
			return nil, fmt.Errorf("summarize %s: %w", path, err)
		}
		var rollouts []format.Rollout
		if rolls != nil {
			if rollouts, err = readShard(rolls, i); err != nil {
				r.Close()
				return nil, fmt.Errorf("summarize %s: %w", path, err)
			}
		}
		for j := 0; r.Next(); j++ {
			row := r.Row()
			if rolls != nil {
				if j < len(rollouts) {
					err = gap.add(&rollouts[j], &row)
				} else {
					err = fmt.Errorf("more rows than rollouts shard %d has (%d)", i, len(rollouts))
				}
				if err != nil {
					r.Close()
					return nil, fmt.Errorf("summarize %s: %w", path, err)
				}
			}
			turns++
			for _, v := range row.OldLogprobs {
				sumOld += float64(v)
			}
			oldTokens += float64(len(row.OldLogprobs))
			if row.PMem == nil || row.PFull == nil {
				continue
			}
			pm, pf := float64(*row.PMem), float64(*row.PFull)
			memories++
			sumMem += pm
			sumFull += pf
			if pm > pf {
				above++
			}
			if h := row.Holds(); h != "" {
				s := split[h]
				s.pMem, s.pFull, s.rMem = append(s.pMem, pm), append(s.pFull, pf), append(s.rMem, pm-pf)
			}
		}
		err = r.Err()
		r.Close()
		if err != nil {
			return nil, fmt.Errorf("summarize %s: %w", path, err)
		}
	}
	out := map[string]float64{"turns": turns, "memory_turns": memories}
	gap.figures(out)
	if oldTokens > 0 {
		out["old_logprob_mean"] = sumOld / oldTokens
	}
	if memories > 0 {
		out["p_mem_mean"] = sumMem / memories
		out["p_full_mean"] = sumFull / memories
		out["p_mem_above_full_frac"] = above / memories
	}
	for class, s := range split {
		out["memories_"+class] = float64(len(s.pMem))
		if len(s.pMem) > 0 {
			out["p_mem_mean_"+class] = stats.Mean(s.pMem)
			out["p_full_mean_"+class] = stats.Mean(s.pFull)
			out["r_mem_mean_"+class] = stats.Mean(s.rMem)
		}
	}
	all, none := split[format.HoldsAll], split[format.HoldsNone]
	if len(all.pMem) > 0 && len(none.pMem) > 0 {
		out["auc_p_mem_all_vs_none"] = stats.AUC(all.pMem, none.pMem)
		out["auc_r_mem_all_vs_none"] = stats.AUC(all.rMem, none.rMem)
	}
	return out, nil
}
