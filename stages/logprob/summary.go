package logprob

import (
	"fmt"
	"path/filepath"

	"github.com/mempo/mempo/format"
)

// summarize is the stage's jobs.Spec.Summarize: what the memory pass found, read back
// from the finished shards, so the manifest tells at a glance whether memories carry
// the answer (p_mem against p_full) without opening a shard.
func summarize(dir string, outputs []format.Output) (map[string]float64, error) {
	var turns, memories, above, sumMem, sumFull, oldTokens, sumOld float64
	for _, o := range outputs {
		path := filepath.Join(dir, o.File)
		r, err := format.OpenFile[format.Logprob](path)
		if err != nil {
			return nil, fmt.Errorf("summarize %s: %w", path, err)
		}
		for r.Next() {
			row := r.Row()
			turns++
			for _, v := range row.OldLogprobs {
				sumOld += float64(v)
			}
			oldTokens += float64(len(row.OldLogprobs))
			if row.PMem == nil || row.PFull == nil {
				continue
			}
			memories++
			sumMem += float64(*row.PMem)
			sumFull += float64(*row.PFull)
			if *row.PMem > *row.PFull {
				above++
			}
		}
		err = r.Err()
		r.Close()
		if err != nil {
			return nil, fmt.Errorf("summarize %s: %w", path, err)
		}
	}
	out := map[string]float64{"turns": turns, "memory_turns": memories}
	if oldTokens > 0 {
		out["old_logprob_mean"] = sumOld / oldTokens
	}
	if memories > 0 {
		out["p_mem_mean"] = sumMem / memories
		out["p_full_mean"] = sumFull / memories
		out["p_mem_above_full_frac"] = above / memories
	}
	return out, nil
}
