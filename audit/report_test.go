package audit

import (
	"bytes"
	"regexp"
	"strings"
	"testing"

	"github.com/mempo/mempo/agent/protocol"
)

// TestWriteTurns: one line per audit with the rate, the recovery counts and the kinds in
// the format's order, "-" where there are none.
func TestWriteTurns(t *testing.T) {
	var b bytes.Buffer
	audits := []TurnAudit{
		{Dir: "a/rollouts", Turns: 40, Invalid: 10, Kinds: map[string]int{protocol.Failures[1]: 3, protocol.Failures[0]: 7},
			Trajectories: 8, WithInvalid: 3, NeverRecover: 2, FirstKinds: map[string]int{protocol.Failures[0]: 3},
			PostInvalid: 7, PostInvalidMem: 1, Recovered: 1},
		{Dir: "b/rollouts", Turns: 5, Trajectories: 2},
	}
	if err := WriteTurns(&b, audits); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	first := regexp.MustCompile(`(?m)^a/rollouts +40 +10 +0\.250 +8 +3 +2 +1 of 7 / 1 +` + protocol.Failures[0] + ` 7, ` + protocol.Failures[1] + ` 3 +` + protocol.Failures[0] + ` 3$`)
	if !first.MatchString(out) || !regexp.MustCompile(`(?m)^b/rollouts +5 +0 +0\.000 .* - +-$`).MatchString(out) {
		t.Errorf("WriteTurns:\n%s", out)
	}
}

// TestWriteTopMemories: each memory's figures, its counts of gold answers and facts (or
// "-" without them) and its text clipped to 90 runes.
func TestWriteTopMemories(t *testing.T) {
	var b bytes.Buffer
	ms := []MemoryAudit{
		{UID: "q1", Sample: 2, Turn: 1, AdvMemory: 1.5, MemReward: 0.25, Golds: "1/2", Facts: "2/3", Tokens: 12, MemEnd: 12,
			ResponseTokens: 40, Kind: "search", Memory: strings.Repeat("x", 100)},
		{UID: "q2", Kind: "no-think", FormatText: []string{"<think>"}, Memory: "m"},
	}
	if err := WriteTopMemories(&b, ms); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"1.50  0.250", " 1/2 ", " 2/3 ", "12/40", "q1/2", `"` + strings.Repeat("x", 90) + `…"`, " <think> ", "q2/0"} {
		if !strings.Contains(out, want) {
			t.Errorf("WriteTopMemories lacks %q:\n%s", want, out)
		}
	}
	if !regexp.MustCompile(`(?m)^0\.00 .* - +- +0 +0/0 `).MatchString(out) {
		t.Errorf("WriteTopMemories: a memory without counts should show - for golds and facts:\n%s", out)
	}
}
