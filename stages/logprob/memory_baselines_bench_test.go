package logprob

import (
	"cmp"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/mempo/mempo/format"
	"github.com/mempo/mempo/internal/stats"
	"github.com/mempo/mempo/model/qwen2"
	"github.com/mempo/mempo/stages/advantage"
)

// BenchmarkMemoryBaselines measures how far cheaper baselines b of the memory reward
// R^M = P_mem − b move the memory advantages from the default's (b = P_full, whose
// stitched histories cost about an old pass at a real model's depth), on a `make demo`
// run's MemPO rollouts: MEMPO_BENCH_RUN names the run (runs/demo) and MEMPO_BENCH_ITER
// the iteration (default 1), scored by the policy that generated it at the log-prob
// stage's temperature. P_mem and P_full are the stage's own (its logprobs dataset).
// The baselines: none (b = 0, `--mem-baseline none`), and ctx (`--mem-baseline
// context`), P_ctx as the stage scores it with --p-ctx: the gold answer's probability
// at temperature 1 after the pruned context the agent saw at that turn (the rollout
// row's prompt_ids) and the memory probe, answer copies in the old pass's trees
// (ctxtok/oldtok: their tokens against the old pass's). Each is pooled per question as
// the default, and reported against it as the Pearson and Spearman correlations of
// A^M and the fraction of memories whose A^M has the same sign. It skips when the
// variable is unset; each iteration times the old pass with the copies.
func BenchmarkMemoryBaselines(b *testing.B) {
	run := os.Getenv("MEMPO_BENCH_RUN")
	if run == "" {
		b.Skip("MEMPO_BENCH_RUN is unset: point it at a `make demo` run directory (runs/demo)")
	}
	iter, policy, _ := runIteration(b, run)
	s := runState(b, policy, filepath.Join(run, "task", "prompts-train"), stageTemperature(b, filepath.Join(iter, "logprobs")))
	defer s.drop()
	rows := readAll[format.Rollout](b, filepath.Join(iter, "rollouts"))
	lps := readAll[format.Logprob](b, filepath.Join(iter, "logprobs"))
	scoreRows := readAll[format.Score](b, filepath.Join(iter, "scores"))

	var old []qwen2.Pair
	var mems []int // rows with a memory
	for i, r := range rows {
		old = append(old, turnPair(&r))
		if hasMemory(&rows[i]) {
			mems = append(mems, i)
		}
	}
	sc := qwen2.ScoreConfig{TokenBudget: s.cfg.TokenBudget, Chunk: s.cfg.Chunk, Temperature: s.cfg.Temperature}
	var pCtx []*float32
	for b.Loop() {
		var err error
		if _, pCtx, err = contextPass(s.policy, "bench", rows, old, s.targets, sc); err != nil {
			b.Fatal(err)
		}
	}
	scores := make([]advantage.Score, len(scoreRows))
	for i, r := range scoreRows {
		scores[i] = advantage.Score{UID: r.UID, Sample: int(r.Sample), Reward: float64(r.Reward)}
	}
	// memAdv is A^M of every memory, pooled per question, with baseline(k) as b of memory k.
	memAdv := func(kind advantage.BaselineKind, baseline func(k int) float64) []float64 {
		turns := make([]advantage.Turn, len(mems))
		for k, i := range mems {
			r := rows[i]
			turns[k] = advantage.Turn{UID: r.UID, Sample: int(r.Sample), Turn: int(r.Turn), ResponseLen: len(r.ResponseIDs),
				Mem: &advantage.Span{Start: int(r.MemStart), End: int(r.MemEnd)}, PMem: float64(*lps[i].PMem), PFull: baseline(k)}
		}
		ac := advantage.DefaultConfig()
		ac.MemBaseline = advantage.Baseline{Kind: kind}
		out, _, err := advantage.Compute(ac, scores, turns)
		if err != nil {
			b.Fatal(err)
		}
		adv := make([]float64, len(out))
		for k, r := range out {
			adv[k] = r.AdvMemory
		}
		return adv
	}
	full := memAdv(advantage.BaselineFull, func(k int) float64 { return float64(*lps[mems[k]].PFull) })
	for _, c := range []struct {
		name string
		adv  []float64
	}{
		{"ctx", memAdv(advantage.BaselineFull, func(k int) float64 { return float64(*pCtx[mems[k]]) })},
		{"none", memAdv(advantage.BaselineNone, func(int) float64 { return 0 })},
	} {
		b.ReportMetric(pearson(c.adv, full), c.name+"_pearson")
		b.ReportMetric(pearson(ranks(c.adv), ranks(full)), c.name+"_spearman")
		b.ReportMetric(sameSign(c.adv, full), c.name+"_same_sign")
	}
	b.ReportMetric(float64(len(mems)), "memories")
	// ctx's cost as answer copies reading the old pass's keys and values: their tokens
	// against the old pass's (qwen2.BranchTokens).
	copies := 0
	for _, i := range mems {
		copies += len(s.targets[rows[i].UID].ids)
	}
	trees, _ := qwen2.PrefixTrees(old)
	b.ReportMetric(float64(copies)/float64(qwen2.BranchTokens(trees)), "ctxtok/oldtok")
}

// stageTemperature is the temperature the log-prob stage scored dir at.
func stageTemperature(b *testing.B, dir string) float64 {
	m, err := format.ReadManifest(dir)
	if err != nil {
		b.Fatal(err)
	}
	var c struct{ Temperature float64 }
	if err := json.Unmarshal(m.Config, &c); err != nil || c.Temperature <= 0 {
		b.Fatalf("%s: manifest config %s: want a temperature", dir, m.Config)
	}
	return c.Temperature
}

func pearson(x, y []float64) float64 {
	mx, my := stats.Mean(x), stats.Mean(y)
	var sxy, sxx, syy float64
	for i := range x {
		sxy += (x[i] - mx) * (y[i] - my)
		sxx += (x[i] - mx) * (x[i] - mx)
		syy += (y[i] - my) * (y[i] - my)
	}
	return sxy / math.Sqrt(sxx*syy)
}

// ranks is each value's rank, ties given their mean rank (for Spearman's correlation).
func ranks(x []float64) []float64 {
	order := make([]int, len(x))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(x[a], x[b]) })
	r := make([]float64, len(x))
	for i := 0; i < len(order); {
		j := i
		for j+1 < len(order) && x[order[j+1]] == x[order[i]] {
			j++
		}
		for k := i; k <= j; k++ {
			r[order[k]] = float64(i+j) / 2
		}
		i = j + 1
	}
	return r
}

// sameSign is the fraction of positions where x and y are both positive or both not.
func sameSign(x, y []float64) float64 {
	n := 0
	for i := range x {
		if (x[i] > 0) == (y[i] > 0) {
			n++
		}
	}
	return float64(n) / float64(len(x))
}

// TestBaselineStatistics checks the figures BenchmarkMemoryBaselines reports on small
// cases: ranks with ties, Pearson's correlation of a linear map and of its reverse,
// and the same-sign fraction.
func TestBaselineStatistics(t *testing.T) {
	if got, want := ranks([]float64{3, 1, 3, 2}), []float64{2.5, 0, 2.5, 1}; !slices.Equal(got, want) {
		t.Errorf("ranks = %v, want %v", got, want)
	}
	x := []float64{1, 2, 4, 8}
	y := []float64{3, 5, 9, 17} // 2x + 1
	if got := pearson(x, y); math.Abs(got-1) > 1e-12 {
		t.Errorf("pearson of a linear map = %v, want 1", got)
	}
	if got := pearson(x, []float64{-1, -2, -4, -8}); math.Abs(got+1) > 1e-12 {
		t.Errorf("pearson of the reverse = %v, want -1", got)
	}
	if got, want := pearson(x, []float64{1, -1, -1, 1}), 3/math.Sqrt(115); math.Abs(got-want) > 1e-12 {
		t.Errorf("pearson = %v, want %v", got, want)
	}
	if got := sameSign([]float64{1, -1, 0, 2}, []float64{3, 1, -2, 0}); got != 0.5 {
		t.Errorf("sameSign = %v, want 0.5", got)
	}
}
