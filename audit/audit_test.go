package audit

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/mempo/mempo/agent/protocol"
	"github.com/mempo/mempo/format"
	"github.com/mempo/mempo/format/formattest"
)

// auditRun writes one iteration: question q with two trajectories. Sample 0: a valid
// search, then a turn that runs on without closing its memory, then one that continues
// the observation, then a valid answer (it recovers). Sample 1: a turn without a thought,
// then two that continue the observation (it never recovers).
func auditRun(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	ok := "<mem>a</mem><think>b</think><search>q</search>"
	turn := func(s, tn int32, resp, action string, mem [2]int32, memory string) format.Rollout {
		return format.Rollout{UID: "q", Sample: s, Turn: tn, Response: resp, Action: action, ResponseIDs: make([]int32, 30),
			MemStart: mem[0], MemEnd: mem[1], Memory: memory}
	}
	rolls := []format.Rollout{
		turn(0, 0, ok, "search", [2]int32{0, 3}, "a"),
		turn(0, 1, "<mem>Ann<|im_start|>assistant", "invalid", [2]int32{}, ""),
		turn(0, 2, "Doc 2(Title: x)", "invalid", [2]int32{}, ""),
		turn(0, 3, "<mem>Ann <think> x</mem><think>b</think><answer>x</answer>", "answer", [2]int32{0, 12}, "Ann <think> x"),
		turn(1, 0, "<mem>c</mem><search>q</search>", "invalid", [2]int32{0, 3}, "c"),
		turn(1, 1, "Doc 1(Title: y)", "invalid", [2]int32{}, ""),
		turn(1, 2, "Doc 1(Title: y)", "invalid", [2]int32{}, ""),
	}
	slices.Reverse(rolls) // the audit must not rely on the row order
	if _, err := formattest.WriteDataset(filepath.Join(dir, "rollouts"), "rollout", [][]format.Rollout{rolls}); err != nil {
		t.Fatal(err)
	}
	f := func(v float32) *float32 { return &v }
	i := func(v int32) *int32 { return &v }
	advs := []format.Advantage{
		{UID: "q", Sample: 0, Turn: 0, MemReward: f(-0.1), AdvMemory: f(-0.5)},
		{UID: "q", Sample: 0, Turn: 1},
		{UID: "q", Sample: 0, Turn: 2},
		{UID: "q", Sample: 0, Turn: 3, MemReward: f(0.4), AdvMemory: f(1.5), AdvOutcome: 0.7},
		{UID: "q", Sample: 1, Turn: 0, MemReward: f(0), AdvMemory: f(-1)},
		{UID: "q", Sample: 1, Turn: 1},
		{UID: "q", Sample: 1, Turn: 2},
	}
	if _, err := formattest.WriteDataset(filepath.Join(dir, "advantages"), "advantage", [][]format.Advantage{advs}); err != nil {
		t.Fatal(err)
	}
	var lps []format.Logprob
	for _, a := range advs {
		l := format.Logprob{UID: a.UID, Sample: a.Sample, Turn: a.Turn}
		if a.AdvMemory != nil {
			l.PMem, l.MemGolds, l.Objectives = f(0.5), i(1), 2
		}
		lps = append(lps, l)
	}
	if _, err := formattest.WriteDataset(filepath.Join(dir, "logprobs"), "logprob", [][]format.Logprob{lps}); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestAuditTurns(t *testing.T) {
	dir := auditRun(t)
	got, err := AuditTurns(filepath.Join(dir, "rollouts"))
	if err != nil {
		t.Fatal(err)
	}
	want := TurnAudit{Dir: filepath.Join(dir, "rollouts"), Turns: 7, Invalid: 5,
		Kinds:        map[string]int{protocol.FailMemUnclosed: 1, protocol.FailNoMemOpen: 3, protocol.FailNoThink: 1},
		Trajectories: 2, WithInvalid: 2, NeverRecover: 1,
		FirstKinds:  map[string]int{protocol.FailMemUnclosed: 1, protocol.FailNoThink: 1},
		PostInvalid: 4, PostInvalidMem: 1, Recovered: 1}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("AuditTurns (-want +got):\n%s", diff)
	}
	if _, err := AuditTurns(filepath.Join(dir, "advantages")); err == nil {
		t.Error("AuditTurns of an advantages dataset: no error")
	}
}

func TestTopMemories(t *testing.T) {
	dir := auditRun(t)
	got, err := TopMemories(filepath.Join(dir, "advantages"), 2)
	if err != nil {
		t.Fatal(err)
	}
	want := []MemoryAudit{
		{UID: "q", Sample: 0, Turn: 3, AdvMemory: 1.5, MemReward: 0.4, AdvOutcome: 0.7, PMem: 0.5, Golds: "1/2",
			Tokens: 12, MemEnd: 12, ResponseTokens: 30, Kind: "answer", FormatText: []string{"<think>"}, Memory: "Ann <think> x"},
		{UID: "q", Sample: 0, Turn: 0, AdvMemory: -0.5, MemReward: -0.1, PMem: 0.5, Golds: "1/2",
			Tokens: 3, MemEnd: 3, ResponseTokens: 30, Kind: "search", Memory: "a"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("TopMemories(2) (-want +got):\n%s", diff)
	}
	low, err := TopMemories(filepath.Join(dir, "advantages"), -1)
	if err != nil {
		t.Fatal(err)
	}
	if len(low) != 1 || low[0].Sample != 1 || low[0].Kind != protocol.FailNoThink || low[0].AdvMemory != -1 {
		t.Errorf("TopMemories(-1) = %+v, want sample 1's no-think memory with A^M -1", low)
	}
}
