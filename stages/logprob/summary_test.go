package logprob

import (
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mempo/mempo/format"
	"github.com/mempo/mempo/format/formattest"
)

func ptr[T any](v T) *T { return &v }

// TestSummarizeSplit: the memory pass's figures split by what each memory holds, and the
// AUC of P_mem and of R^M = P_mem − P_full between memories holding every answer and
// memories holding none.
func TestSummarizeSplit(t *testing.T) {
	mem := func(turn int32, pMem, pFull, pCtx float32, golds int32) format.Logprob {
		return format.Logprob{UID: "q", Turn: turn, OldLogprobs: []float32{-1}, RefLogprobs: []float32{-1},
			PMem: &pMem, PFull: &pFull, PCtx: &pCtx, MemGolds: ptr(golds), Objectives: 2}
	}
	rows := []format.Logprob{
		// Binary fractions, so that R^M ties are exact in float32.
		mem(0, 0.5, 0.125, 0.5, 2),   // all: R^M 0.375, with P_ctx 0
		mem(1, 0.375, 0.25, 0.25, 2), // all: R^M 0.125, with P_ctx 0.125
		mem(2, 0.25, 0.0625, 0, 1),   // some
		mem(3, 0.4375, 0.25, 0.5, 0), // none: R^M 0.1875, P_mem above one "all" memory; with P_ctx −0.0625
		mem(4, 0.125, 0, 0, 0),       // none: R^M 0.125, ties the second "all" memory; with P_ctx 0.125
		{UID: "q", Turn: 5, OldLogprobs: []float32{-1}, RefLogprobs: []float32{-1}, Objectives: 2}, // no memory
	}
	rows[4].PCtx = nil // scored without P_ctx: counted for P_full only
	dir := filepath.Join(t.TempDir(), "lp")
	d, err := formattest.WriteDataset(dir, "test", [][]format.Logprob{rows})
	if err != nil {
		t.Fatal(err)
	}
	got, err := summarize(dir, d.Manifest.Outputs, nil)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]float64{
		"memory_turns": 5, "memories_all": 2, "memories_some": 1, "memories_none": 2,
		"p_mem_mean_all": 0.4375, "p_full_mean_all": 0.1875, "r_mem_mean_all": 0.25,
		"p_mem_mean_none": 0.28125, "r_mem_mean_none": 0.15625,
		// P_mem: 0.5 beats both; 0.375 beats 0.125, loses to 0.4375 → 3/4.
		"auc_p_mem_all_vs_none": 0.75,
		// R^M: 0.375 beats both; 0.125 ties 0.125, loses to 0.1875 → 2.5/4.
		"auc_r_mem_all_vs_none": 0.625,
		"p_full_mean":           0.6875 / 5, "p_mem_above_full_frac": 1,
		// P_ctx over the first four: 0.5, 0.25, 0 and 0.5.
		"p_ctx_mean": 0.3125, "p_mem_above_ctx_frac": 0.5, "p_ctx_mean_all": 0.375,
		"r_mem_ctx_mean_all": 0.0625, "r_mem_ctx_mean_none": -0.0625,
		// R^M with P_ctx: 0 and 0.125 both beat −0.0625.
		"auc_r_mem_ctx_all_vs_none": 1,
	} {
		if g, ok := got[name]; !ok || math.Abs(g-want) > 1e-6 {
			t.Errorf("summary[%q] = %v (present %v), want %v", name, g, ok, want)
		}
	}
}

// TestSummarizeFactsSplit: with supporting facts, the same figures split by the facts
// each memory holds (a memory can name both answers and hold no fact of the chain, or
// the reverse), under keys of their own; without facts no such key appears.
func TestSummarizeFactsSplit(t *testing.T) {
	mem := func(turn int32, pMem, pFull float32, golds, facts int32) format.Logprob {
		return format.Logprob{UID: "q", Turn: turn, OldLogprobs: []float32{-1}, RefLogprobs: []float32{-1},
			PMem: &pMem, PFull: &pFull, MemGolds: ptr(golds), Objectives: 2, MemFacts: ptr(facts), Facts: 3}
	}
	rows := []format.Logprob{
		mem(0, 0.5, 0.125, 2, 3),    // names all, facts all: R^M 0.375
		mem(1, 0.25, 0.125, 2, 0),   // names all, facts none: R^M 0.125
		mem(2, 0.375, 0.25, 0, 3),   // names none, facts all: R^M 0.125
		mem(3, 0.125, 0, 0, 1),      // names none, facts some: R^M 0.125
		mem(4, 0.0625, 0.125, 1, 0), // names some, facts none: R^M −0.0625
	}
	dir := filepath.Join(t.TempDir(), "lp")
	d, err := formattest.WriteDataset(dir, "test", [][]format.Logprob{rows}, format.WithOptional("mem_facts", "facts"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := summarize(dir, d.Manifest.Outputs, nil)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]float64{
		"memories_all": 2, "memories_none": 2, "memories_some": 1,
		"memories_facts_all": 2, "memories_facts_some": 1, "memories_facts_none": 2,
		"p_mem_mean_facts_all": 0.4375, "p_mem_mean_facts_none": 0.15625, "p_mem_mean_facts_some": 0.125,
		"p_full_mean_facts_all": 0.1875, "r_mem_mean_facts_all": 0.25, "r_mem_mean_facts_none": 0.03125,
		// P_mem by facts: 0.5 and 0.375 beat 0.25 and 0.0625 → 1.
		"auc_p_mem_facts_all_vs_none": 1,
		// R^M by facts: 0.375 beats both; 0.125 ties 0.125 and beats −0.0625 → 3.5/4.
		"auc_r_mem_facts_all_vs_none": 0.875,
		// By names, the same memories rank otherwise: P_mem 0.5, 0.25 vs 0.375, 0.125 → 3/4.
		"auc_p_mem_all_vs_none": 0.75,
	} {
		if g, ok := got[name]; !ok || math.Abs(g-want) > 1e-6 {
			t.Errorf("summary[%q] = %v (present %v), want %v", name, g, ok, want)
		}
	}

	// The same rows without facts: no key by facts.
	for i := range rows {
		rows[i].MemFacts, rows[i].Facts = nil, 0
	}
	dir = filepath.Join(t.TempDir(), "plain")
	if d, err = formattest.WriteDataset(dir, "test", [][]format.Logprob{rows}); err != nil {
		t.Fatal(err)
	}
	if got, err = summarize(dir, d.Manifest.Outputs, nil); err != nil {
		t.Fatal(err)
	}
	for name := range got {
		if strings.Contains(name, "facts") {
			t.Errorf("summary without facts has %q", name)
		}
	}
}

// TestSummarizeDrift: the mean and largest |sampling − old| over the tokens of rows
// paired by position with their rollouts, rows without sampling log-probs skipped; a
// row out of step with its rollout is an error.
func TestSummarizeDrift(t *testing.T) {
	roll := func(turn int32, lp ...float32) format.Rollout {
		ids := make([]int32, len(lp))
		return format.Rollout{UID: "q", Turn: turn, PromptIDs: []int32{1}, ResponseIDs: ids, SamplingLogprobs: lp}
	}
	lp := func(turn int32, old ...float32) format.Logprob {
		return format.Logprob{UID: "q", Turn: turn, OldLogprobs: old, RefLogprobs: old, Objectives: 1}
	}
	base := t.TempDir()
	write := func(name string, rows any) *format.Dataset {
		var d *format.Dataset
		var err error
		switch rows := rows.(type) {
		case []format.Rollout:
			d, err = formattest.WriteDataset(filepath.Join(base, name), "test", [][]format.Rollout{rows})
		case []format.Logprob:
			d, err = formattest.WriteDataset(filepath.Join(base, name), "test", [][]format.Logprob{rows})
		}
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	rolls := write("rollouts", []format.Rollout{roll(0, -1, -0.5), {UID: "q", Turn: 1, PromptIDs: []int32{1}, ResponseIDs: []int32{0}}, roll(2, -2)})
	scored := write("lp", []format.Logprob{lp(0, -1.25, -0.5), lp(1, -9), lp(2, -0.5)})
	got, err := summarize(scored.Dir, scored.Manifest.Outputs, rolls)
	if err != nil {
		t.Fatal(err)
	}
	// Gaps 0.25, 0 and 1.5 over three tokens; turn 1 has no sampling log-probs.
	if got["sampling_drift_mean"] != 1.75/3 || got["sampling_drift_max"] != 1.5 {
		t.Errorf("drift mean %v max %v, want %v and 1.5", got["sampling_drift_mean"], got["sampling_drift_max"], 1.75/3)
	}
	skewed := write("skewed", []format.Logprob{lp(0, -1, -0.5), lp(2, -2), lp(1, -9)})
	if _, err := summarize(skewed.Dir, skewed.Manifest.Outputs, rolls); err == nil {
		t.Errorf("summarize of rows out of step with the rollouts: nil error")
	}
}
