package logprob

import (
	"math"
	"path/filepath"
	"testing"

	"github.com/mempo/mempo/format"
	"github.com/mempo/mempo/format/formattest"
)

func ptr[T any](v T) *T { return &v }

// TestSummarizeSplit: the memory pass's figures split by what each memory holds, and the
// AUC of P_mem and of R^M = P_mem − P_full between memories holding every answer and
// memories holding none.
func TestSummarizeSplit(t *testing.T) {
	mem := func(turn int32, pMem, pFull float32, golds int32) format.Logprob {
		return format.Logprob{UID: "q", Turn: turn, OldLogprobs: []float32{-1}, RefLogprobs: []float32{-1},
			PMem: &pMem, PFull: &pFull, MemGolds: ptr(golds), Objectives: 2}
	}
	rows := []format.Logprob{
		// Binary fractions, so that R^M ties are exact in float32.
		mem(0, 0.5, 0.125, 2),   // all: R^M 0.375
		mem(1, 0.375, 0.25, 2),  // all: R^M 0.125
		mem(2, 0.25, 0.0625, 1), // some
		mem(3, 0.4375, 0.25, 0), // none: R^M 0.1875, P_mem above one "all" memory
		mem(4, 0.125, 0, 0),     // none: R^M 0.125, ties the second "all" memory
		{UID: "q", Turn: 5, OldLogprobs: []float32{-1}, RefLogprobs: []float32{-1}, Objectives: 2}, // no memory
	}
	dir := filepath.Join(t.TempDir(), "lp")
	d, err := formattest.WriteDataset(dir, "test", [][]format.Logprob{rows})
	if err != nil {
		t.Fatal(err)
	}
	got, err := summarize(dir, d.Manifest.Outputs)
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
	} {
		if g, ok := got[name]; !ok || math.Abs(g-want) > 1e-6 {
			t.Errorf("summary[%q] = %v (present %v), want %v", name, g, ok, want)
		}
	}
}
