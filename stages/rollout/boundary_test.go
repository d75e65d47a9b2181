package rollout

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"testing"

	"github.com/mempo/mempo/agent/protocol"
	"github.com/mempo/mempo/audit"
	"github.com/mempo/mempo/format"
	"github.com/mempo/mempo/jobs"
	"github.com/mempo/mempo/stages/advantage"
	"github.com/mempo/mempo/stages/logprob"
	"github.com/mempo/mempo/stages/score"
)

// TestRolloutsFeedMemoryPass crosses the rollout → logprob boundary with what the rollout
// stage really writes (rollouts once carried no observation_ids, so P_full was
// scored on histories without a single retrieved document, and each stage's tests built
// their own rows and never saw it). The oracle agent runs once under the mempo context and
// once under the full context; its turns depend only on (uid, turn), so both runs hold the
// same trajectories, and each full-context row's prompt_ids is exactly what the full agent
// saw. Then:
//   - every row's observation_ids is the tokenizer's encoding of its observation, empty
//     exactly when the observation is, and the dataset passes format's row invariants;
//   - the history the memory pass scores P_full after (logprob.History) equals, token for
//     token, the full agent's context at that turn, for every memory turn;
//   - the log-prob stage scores the real rows: every memory turn gets p_mem, p_full, p_ctx
//     and mem_golds, and the oracle's answering memory holds every gold answer; a first
//     turn's p_ctx equals its p_full, both conditioned on the prompt alone.
func TestRolloutsFeedMemoryPass(t *testing.T) {
	f := testFixture(t)
	dir := t.TempDir()
	rollouts := func(name string, ctx protocol.ContextPolicy) string {
		cfg := DefaultConfig()
		cfg.N, cfg.MaxTurns, cfg.PromptsPerShard, cfg.Context = 2, 6, 4, ctx
		out := filepath.Join(dir, name)
		in := Inputs{Prompts: f.train, Policy: f.policy, Index: f.index}
		if _, err := run(context.Background(), cfg, in, jobs.Spec{Out: out, Seed: 3}, newScripted(f.tok, f.oracle).loader()); err != nil {
			t.Fatalf("rollout --context %s: %v", ctx, err)
		}
		return out
	}
	mempoDir, fullDir := rollouts("mempo", protocol.Mempo), rollouts("full", protocol.Full)

	d, err := format.OpenDataset(mempoDir)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.CheckRows(5); err != nil {
		t.Errorf("CheckRows(%s) = %v", mempoDir, err)
	}
	rows, full := readRows(t, mempoDir), readRows(t, fullDir)
	if len(rows) != len(full) {
		t.Fatalf("mempo run has %d rows, full run %d: the oracle's trajectories should not depend on the context", len(rows), len(full))
	}
	observed := 0
	for i, r := range rows {
		if want := f.tok.Encode(r.Observation); !slices.Equal(r.ObservationIDs, want) {
			t.Fatalf("row %d (uid %s sample %d turn %d): observation_ids = %v, want Encode(observation) = %v", i, r.UID, r.Sample, r.Turn, r.ObservationIDs, want)
		}
		if r.Observation != "" {
			observed++
		}
	}
	if observed == 0 {
		t.Fatal("no row has an observation: the oracle should search")
	}

	trajs, err := format.Trajectories(rows)
	if err != nil {
		t.Fatal(err)
	}
	fullTrajs, err := format.Trajectories(full)
	if err != nil {
		t.Fatal(err)
	}
	memories := 0
	for i, tr := range trajs {
		ids, ends := logprob.History(tr)
		for turn, r := range tr {
			if r.MemEnd == r.MemStart {
				continue
			}
			memories++
			seen := fullTrajs[i][turn]
			if seen.UID != r.UID || seen.Sample != r.Sample || seen.Turn != r.Turn {
				t.Fatalf("full run row is uid %s sample %d turn %d, mempo run uid %s sample %d turn %d", seen.UID, seen.Sample, seen.Turn, r.UID, r.Sample, r.Turn)
			}
			got := make([]int32, ends[turn])
			for j, id := range ids[:ends[turn]] {
				got[j] = int32(id)
			}
			if !slices.Equal(got, seen.PromptIDs) {
				t.Fatalf("uid %s sample %d turn %d: P_full history has %d tokens, the full agent saw %d; they differ:\n%q\nvs\n%q",
					r.UID, r.Sample, r.Turn, len(got), len(seen.PromptIDs), f.tok.Decode(got), f.tok.Decode(seen.PromptIDs))
			}
		}
	}
	if memories == 0 {
		t.Fatal("no memory turn")
	}

	cfg := logprob.DefaultConfig()
	cfg.TokenBudget, cfg.Chunk, cfg.PCtx = 2048, 64, true
	out := filepath.Join(dir, "logprobs")
	in := logprob.Inputs{Rollouts: mempoDir, Prompts: f.train, Policy: f.policy, Ref: f.policy}
	res, err := logprob.Run(context.Background(), cfg, in, jobs.Spec{Out: out})
	if err != nil {
		t.Fatalf("logprob on the rollout stage's rows: %v", err)
	}
	// The oracle's first memory is empty and its answering memory complete, so the
	// summary splits the memories both ways and ranks them.
	for _, k := range []string{"memories_all", "memories_none", "auc_r_mem_all_vs_none", "auc_r_mem_ctx_all_vs_none"} {
		if res.Manifest.Metrics[k] <= 0 {
			t.Errorf("logprobs manifest %s = %v, want > 0", k, res.Manifest.Metrics[k])
		}
	}
	lps, err := format.ReadDataset[format.Logprob](out)
	if err != nil {
		t.Fatal(err)
	}
	for i, l := range lps {
		r := rows[i]
		if (r.MemEnd > r.MemStart) != (l.PMem != nil && l.PFull != nil && l.PCtx != nil && l.MemGolds != nil) {
			t.Errorf("uid %s sample %d turn %d: memory span [%d, %d) but p_mem %v p_full %v p_ctx %v mem_golds %v", r.UID, r.Sample, r.Turn, r.MemStart, r.MemEnd, l.PMem, l.PFull, l.PCtx, l.MemGolds)
		} else if r.Turn == 0 && l.PCtx != nil && math.Abs(float64(*l.PCtx-*l.PFull)) > 1e-5 {
			t.Errorf("uid %s sample %d turn 0: p_ctx %v, p_full %v, want equal: both condition on the prompt alone", r.UID, r.Sample, *l.PCtx, *l.PFull)
		}
		if r.Action == string(protocol.Answer) && l.Holds() != format.HoldsAll {
			t.Errorf("uid %s sample %d: the oracle's answering memory %q holds %v of %d gold answers, want all", r.UID, r.Sample, r.Memory, l.MemGolds, l.Objectives)
		}
		if want := len(f.byUID[r.UID].Facts()); (l.MemGolds != nil) != (l.MemFacts != nil) || (l.MemFacts != nil && int(l.Facts) != want) {
			t.Errorf("uid %s sample %d turn %d: mem_facts %v of %d, want a count of the prompt's %d facts on every memory turn", r.UID, r.Sample, r.Turn, l.MemFacts, l.Facts, want)
		}
		if r.Action == string(protocol.Answer) && l.HoldsFacts() != format.HoldsAll {
			t.Errorf("uid %s sample %d: the oracle's answering memory %q holds %v of %d supporting facts, want all", r.UID, r.Sample, r.Memory, l.MemFacts, l.Facts)
		}
	}
	for _, k := range []string{"memories_facts_all", "memories_facts_none", "auc_r_mem_facts_all_vs_none"} {
		if res.Manifest.Metrics[k] <= 0 {
			t.Errorf("logprobs manifest %s = %v, want > 0 (the prompts gen-task writes carry facts)", k, res.Manifest.Metrics[k])
		}
	}
	checkMemoryAudit(t, f, mempoDir, out, rows)
}

// checkMemoryAudit carries the rollout and log-prob stages' real output on through the
// score and advantage stages: the advantage summary splits the memory rewards by facts,
// and `mempo inspect --top-memories` (audit.TopMemories) reads each memory's facts count
// back from the datasets the stages wrote.
func checkMemoryAudit(t *testing.T, f *fixture, rollouts, logprobs string, rows []format.Rollout) {
	t.Helper()
	dir := filepath.Dir(logprobs)
	scores, advantages := filepath.Join(dir, "scores"), filepath.Join(dir, "advantages")
	if _, err := score.Run(context.Background(), score.DefaultConfig(), score.Inputs{Rollouts: rollouts, Prompts: f.train}, jobs.Spec{Out: scores}); err != nil {
		t.Fatalf("score: %v", err)
	}
	res, err := advantage.Run(context.Background(), advantage.DefaultConfig(),
		advantage.Inputs{Rollouts: rollouts, Scores: scores, Logprobs: logprobs}, jobs.Spec{Out: advantages})
	if err != nil {
		t.Fatalf("advantage: %v", err)
	}
	for _, k := range []string{"memories_facts_all", "memories_facts_none", "mem_reward_mean_facts_all"} {
		if _, ok := res.Manifest.Metrics[k]; !ok {
			t.Errorf("advantages manifest has no %s: %v", k, res.Manifest.Metrics)
		}
	}
	if got, want := res.Manifest.Metrics["memories_facts_all"]+res.Manifest.Metrics["memories_facts_some"]+res.Manifest.Metrics["memories_facts_none"],
		res.Manifest.Metrics["memories"]; got != want {
		t.Errorf("advantages manifest: %v memories split by facts, want all %v", got, want)
	}
	ms, err := audit.TopMemories(advantages, len(rows))
	if err != nil {
		t.Fatal(err)
	}
	answering := 0
	for _, m := range ms {
		if m.Kind != string(protocol.Answer) {
			continue
		}
		answering++
		if n := len(f.byUID[m.UID].Facts()); m.Facts != fmt.Sprintf("%d/%d", n, n) {
			t.Errorf("uid %s sample %d: top-memories facts %q, want %d/%d for the oracle's answering memory", m.UID, m.Sample, m.Facts, n, n)
		}
	}
	if answering == 0 {
		t.Errorf("top memories %+v: no answering turn", ms)
	}
}
