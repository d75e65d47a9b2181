package task

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/mempo/mempo/agent/protocol"
)

// byteTok is a tokenizer with one id per byte: enough to replay text through the episode.
type byteTok struct{}

func (byteTok) Encode(s string) []int32 {
	ids := make([]int32, len(s))
	for i := range len(s) {
		ids[i] = int32(s[i])
	}
	return ids
}

func (byteTok) Decode(ids []int32) string {
	b := make([]byte, len(ids))
	for i, id := range ids {
		b[i] = byte(id)
	}
	return string(b)
}

func play(t *testing.T, w *World, qs []Prompt, oc OracleConfig) []Trajectory {
	t.Helper()
	o, err := NewOracle(w, protocol.Default(), NewExact(w, 3), oc)
	if err != nil {
		t.Fatal(err)
	}
	var out []Trajectory
	for _, q := range qs {
		tr, err := o.Play(context.Background(), q)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, tr)
	}
	return out
}

func TestOraclePerfect(t *testing.T) {
	w := mustGenerate(t, smallConfig(5))
	p := protocol.Default()
	qs := append(append([]Prompt{}, w.Train...), w.Test...)
	trs := play(t, w, qs, OracleConfig{MaxTurns: 16, Seed: 1})
	for i, tr := range trs {
		q := qs[i]
		want := make([]string, q.K)
		for j, g := range q.Golds {
			want[j] = g[0]
		}
		if tr.Answer != strings.Join(want, "; ") {
			t.Fatalf("question %s %q: answer %q, want %q\nsteps: %+v", q.UID, q.Question, tr.Answer, strings.Join(want, "; "), tr.Steps)
		}
		if tr.Drops != 0 || tr.Found != tr.Kept || tr.Found != len(q.Facts()) {
			t.Errorf("question %s: found %d kept %d drops %d, want all %d facts kept", q.UID, tr.Found, tr.Kept, tr.Drops, len(q.Facts()))
		}
		if found, kept := Retention(q.Facts(), observations(tr), finalMemory(tr, p)); kept != found || found != len(q.Facts()) {
			t.Errorf("question %s: Retention() = %d, %d, want %d, %d", q.UID, found, kept, len(q.Facts()), len(q.Facts()))
		}
		if got := len(tr.Steps); got != len(q.Facts())+1 {
			t.Errorf("question %s: %d turns, want one search per fact plus the answer (%d)", q.UID, got, len(q.Facts())+1)
		}
	}
}

// TestOracleReplays checks that expert trajectories are valid protocol turns: replayed
// through protocol.Episode they search, observe exactly what the oracle saw, and answer.
func TestOracleReplays(t *testing.T) {
	w := mustGenerate(t, smallConfig(6))
	p := protocol.Default()
	oc := OracleConfig{Drop: 0.3, Distractor: 0.3, MaxTurns: 6, Seed: 2}
	trs := play(t, w, w.Test, oc)
	for i, tr := range trs {
		e, err := protocol.NewEpisode(p, nil, byteTok{}, protocol.Config{Context: protocol.Mempo, MaxTurns: oc.MaxTurns}, w.Test[i].Question, w.Test[i].K)
		if err != nil {
			t.Fatal(err)
		}
		for j, s := range tr.Steps {
			if err := e.Step(protocol.Generation{IDs: byteTok{}.Encode(s.Response)}); err != nil {
				t.Fatal(err)
			}
			if q, ok := e.Query(); ok {
				if q != s.Query {
					t.Fatalf("trajectory %s turn %d: episode query %q, oracle %q", tr.UID, j, q, s.Query)
				}
				if err := e.Observe(s.Docs); err != nil {
					t.Fatal(err)
				}
				if got := e.Records()[j].Observation; got != s.Observation {
					t.Fatalf("trajectory %s turn %d: episode observation %q, oracle %q", tr.UID, j, got, s.Observation)
				}
			}
		}
		if got, ok := e.Answer(); !e.Done() || !ok || got != tr.Answer {
			t.Fatalf("trajectory %s: replay done %v answer %q (%v), want %q", tr.UID, e.Done(), got, ok, tr.Answer)
		}
	}
}

func TestOracleForgetsAtRate(t *testing.T) {
	w := mustGenerate(t, smallConfig(7))
	retention := map[float64]float64{}
	for _, p := range []float64{0, 0.2, 0.5} {
		trs := play(t, w, w.Test, OracleConfig{Drop: p, MaxTurns: 16, Seed: 3})
		drops, chances, found, kept := 0, 0, 0, 0
		for _, tr := range trs {
			drops += tr.Drops
			chances += tr.Chances
			found += tr.Found
			kept += tr.Kept
		}
		if chances < 2000 {
			t.Fatalf("p=%v: only %d chances to forget; the test needs more", p, chances)
		}
		// Binomial: sd = sqrt(p(1-p)/n) < 0.012 here; 0.04 is a loose bound.
		if rate := float64(drops) / float64(chances); math.Abs(rate-p) > 0.04 {
			t.Errorf("p=%v: drop rate %.3f over %d chances", p, rate, chances)
		}
		retention[p] = float64(kept) / float64(found)
	}
	if retention[0] != 1 || !(retention[0.2] < retention[0]) || !(retention[0.5] < retention[0.2]) {
		t.Errorf("final-memory retention by p = %v, want 1 at p=0 and falling with p", retention)
	}
}

func TestOracleDistractor(t *testing.T) {
	w := mustGenerate(t, smallConfig(8))
	wrong := 0
	trs := play(t, w, w.Test, OracleConfig{Distractor: 1, MaxTurns: 16, Seed: 4})
	for i, tr := range trs {
		answers := protocol.Default().Answers(tr.Answer)
		for j, g := range w.Test[i].Golds {
			if answers[j] != g[0] {
				wrong++
			}
		}
	}
	if wrong == 0 {
		t.Fatalf("distractor probability 1 never led to a wrong answer")
	}
}

// observations lists the trajectory's observation texts in order.
func observations(t Trajectory) []string {
	var out []string
	for _, s := range t.Steps {
		if s.Observation != "" {
			out = append(out, s.Observation)
		}
	}
	return out
}

// finalMemory is the memory of the last turn as the protocol parses it.
func finalMemory(t Trajectory, p *protocol.Protocol) string {
	if len(t.Steps) == 0 {
		return ""
	}
	return p.ParseText(t.Steps[len(t.Steps)-1].Response).Memory
}
