package logprob

import (
	"fmt"
	"path/filepath"

	"github.com/mempo/mempo/format"
	"github.com/mempo/mempo/internal/stats"
)

// baselines are the memory reward's baselines the stage scores, by the name summary
// figures give them: P_full (the default) and P_ctx.
var baselines = []struct {
	name string
	of   func(*format.Logprob) *float32
}{
	{"full", func(l *format.Logprob) *float32 { return l.PFull }},
	{"ctx", func(l *format.Logprob) *float32 { return l.PCtx }},
}

// memStats accumulates the figures of one baseline b over the memories that have it:
// P_mem, b and R^M = P_mem − b, all together and split by what each memory holds.
type memStats struct {
	n, above   float64
	pMem, base []float64
	split      map[string]*memSplit
	// facts splits the same figures by the supporting facts the memory holds
	// (format.Logprob.HoldsFacts); empty when the prompts carry no facts.
	facts map[string]*memSplit
}

type memSplit struct{ pMem, base, r []float64 }

func newMemStats() *memStats {
	m := &memStats{split: map[string]*memSplit{}, facts: map[string]*memSplit{}}
	for _, h := range format.HoldsClasses {
		m.split[h], m.facts[h] = &memSplit{}, &memSplit{}
	}
	return m
}

func (m *memStats) add(row *format.Logprob, b float64) {
	pm := float64(*row.PMem)
	m.n++
	m.pMem, m.base = append(m.pMem, pm), append(m.base, b)
	if pm > b {
		m.above++
	}
	if h := row.Holds(); h != "" {
		m.split[h].add(pm, b)
	}
	if h := row.HoldsFacts(); h != "" {
		m.facts[h].add(pm, b)
	}
}

func (s *memSplit) add(pm, b float64) {
	s.pMem, s.base, s.r = append(s.pMem, pm), append(s.base, b), append(s.r, pm-b)
}

// classing is one way the summaries class memories: its keys' prefix and its splits.
type classing struct {
	prefix string
	by     map[string]*memSplit
}

// classings are the splits the summaries carry: by gold answer names, and by
// supporting facts (prefix "facts_") when the prompts had them.
func (m *memStats) classings() []classing {
	c := []classing{{"", m.split}}
	if m.factsSeen() {
		c = append(c, classing{"facts_", m.facts})
	}
	return c
}

// factsSeen reports whether any memory was classed by supporting facts: only then do
// the summaries carry the figures by facts, so a run without facts keeps its keys.
func (m *memStats) factsSeen() bool {
	for _, s := range m.facts {
		if len(s.pMem) > 0 {
			return true
		}
	}
	return false
}

// figures writes m's figures for baseline name: p_<name>_mean, p_mem_above_<name>_frac,
// p_<name>_mean_<class> and the memory reward's r<suffix>_mean_<class> and
// auc_r<suffix>_all_vs_none, where the default baseline's suffix is "_mem" (the
// figures' names before P_ctx existed) and P_ctx's "_mem_ctx". The classes are by gold
// answer names; by supporting facts, when the prompts have them, the same figures
// follow with class facts_<class> and AUC auc_r<suffix>_facts_all_vs_none.
func (m *memStats) figures(out map[string]float64, name string) {
	if m.n == 0 {
		return
	}
	r := "r_mem"
	if name != "full" {
		r += "_" + name
	}
	out["p_"+name+"_mean"] = stats.Mean(m.base)
	out["p_mem_above_"+name+"_frac"] = m.above / m.n
	for _, sp := range m.classings() {
		for class, s := range sp.by {
			if len(s.pMem) > 0 {
				out["p_"+name+"_mean_"+sp.prefix+class] = stats.Mean(s.base)
				out[r+"_mean_"+sp.prefix+class] = stats.Mean(s.r)
			}
		}
		all, none := sp.by[format.HoldsAll], sp.by[format.HoldsNone]
		if len(all.r) > 0 && len(none.r) > 0 {
			out["auc_"+r+"_"+sp.prefix+"all_vs_none"] = stats.AUC(all.r, none.r)
		}
	}
}

// summarize is the stage's jobs.Spec.Summarize: what the memory pass found, read back
// from the finished shards, so the manifest tells at a glance whether memories carry
// the answer without opening a shard. Figures are split by what the memory holds
// (format.Logprob.Holds), and auc_*_all_vs_none says how well P_mem and R^M = P_mem − b
// rank memories holding every gold answer above those holding none (0.5 is chance) —
// whether the memory reward measures what MemPO claims it measures — for each baseline
// b scored (P_full, P_ctx). With rolls, the rollouts shard i of outputs scored, it also
// reports the sampling drift (see drift).
func summarize(dir string, outputs []format.Output, rolls *format.Dataset) (map[string]float64, error) {
	var turns, oldTokens, sumOld float64
	var gap drift
	mem := newMemStats() // P_mem itself, as against a baseline of 0
	base := make([]*memStats, len(baselines))
	for k := range base {
		base[k] = newMemStats()
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
			if row.PMem == nil {
				continue
			}
			mem.add(&row, 0)
			for k, b := range baselines {
				if v := b.of(&row); v != nil {
					base[k].add(&row, float64(*v))
				}
			}
		}
		err = r.Err()
		r.Close()
		if err != nil {
			return nil, fmt.Errorf("summarize %s: %w", path, err)
		}
	}
	out := map[string]float64{"turns": turns, "memory_turns": mem.n}
	gap.figures(out)
	if oldTokens > 0 {
		out["old_logprob_mean"] = sumOld / oldTokens
	}
	if mem.n > 0 {
		out["p_mem_mean"] = stats.Mean(mem.pMem)
	}
	for _, c := range mem.classings() {
		for class, s := range c.by {
			out["memories_"+c.prefix+class] = float64(len(s.pMem))
			if len(s.pMem) > 0 {
				out["p_mem_mean_"+c.prefix+class] = stats.Mean(s.pMem)
			}
		}
		all, none := c.by[format.HoldsAll], c.by[format.HoldsNone]
		if len(all.pMem) > 0 && len(none.pMem) > 0 {
			out["auc_p_mem_"+c.prefix+"all_vs_none"] = stats.AUC(all.pMem, none.pMem)
		}
	}
	for k, b := range baselines {
		base[k].figures(out, b.name)
	}
	return out, nil
}
