package sft

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/mempo/mempo/agent/protocol"
	"github.com/mempo/mempo/agent/search"
	"github.com/mempo/mempo/jobs"
	"github.com/mempo/mempo/model/qwen2"
	"github.com/mempo/mempo/model/qwen2/qwen2test"
)

// TestSharePrefixes: SFT with a context loss run as tree passes over the prefixes a
// batch's turns share writes the weights the unshared passes write, to float rounding
// (relative L2 difference of the weights' change), under another cache key. The
// oracle's real turns do share: each batch's tree pass computes fewer slots than its
// turns hold, so the comparison is not of two flat passes.
func TestSharePrefixes(t *testing.T) {
	f := newFixture(t)
	cfg := testConfig()
	cfg.Epochs, cfg.ContextLossWeight = 1, 0.2

	r := planned(t, cfg, f.in)
	for k, b := range r.steps {
		var pairs []qwen2.Pair
		tokens := 0
		for _, j := range b.Examples {
			e := r.examples[j]
			pairs = append(pairs, e.Pair)
			tokens += e.len()
		}
		lengths, _ := qwen2.TreeShape(pairs, true)
		if n := sum(lengths); len(pairs) > 1 && n >= tokens {
			t.Errorf("step %d: the tree pass runs %d tokens for turns of %d: nothing shared", k, n, tokens)
		}
	}

	cfg.SharePrefixes = false
	plain, err := Run(context.Background(), cfg, f.in, jobs.Spec{Out: filepath.Join(f.dir, "plain"), Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	cfg.SharePrefixes = true
	shared, err := Run(context.Background(), cfg, f.in, jobs.Spec{Out: filepath.Join(f.dir, "shared"), Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if shared.Key == plain.Key {
		t.Errorf("--share-prefixes did not change the cache key %s", shared.Key.Short())
	}
	if d := qwen2test.ChangeDiff(t, f.in.Policy, shared.Dir, plain.Dir); !(d <= 1e-5) {
		t.Errorf("weights' change with shared prefixes differs by %.3g relative over %d steps, want <= 1e-5", d, shared.State.Step)
	} else {
		t.Logf("weights' change differs by %.3g relative over %d steps", d, shared.State.Step)
	}
}

// planned is the run Run would train under cfg on in, prepared: its examples and steps.
func planned(t *testing.T, cfg Config, in Inputs) *run {
	t.Helper()
	w, qs, err := questions(in, cfg.Questions)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := search.OpenLocal(in.Index, search.LocalConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { idx.Close() })
	r := &run{cfg: cfg, in: in, p: protocol.Default(), seed: 1, world: w, questions: qs, index: idx}
	if _, err := r.prepare(context.Background()); err != nil {
		t.Fatal(err)
	}
	return r
}

func sum(xs []int) int {
	n := 0
	for _, x := range xs {
		n += x
	}
	return n
}
