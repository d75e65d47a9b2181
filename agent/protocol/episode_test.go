package protocol

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// scripted is the fake policy: each episode replays its canned responses in order.
type scripted struct {
	tok     byteTok
	scripts map[*Episode][]string
	calls   int
}

func (s *scripted) Generate(_ context.Context, contexts [][]int32, eps []*Episode) ([]Generation, error) {
	s.calls++
	gens := make([]Generation, len(eps))
	for i, e := range eps {
		script := s.scripts[e]
		if e.Turn() >= len(script) {
			return nil, fmt.Errorf("script exhausted at turn %d", e.Turn())
		}
		text := script[e.Turn()]
		gens[i] = Generation{IDs: s.tok.Encode(text), Truncated: text == truncatedText}
	}
	return gens, nil
}

const truncatedText = "<mem>cut</mem><think>still thinking and thinking"

// fakeRetriever returns one document echoing the query.
type fakeRetriever struct{ batches [][]string }

func (r *fakeRetriever) Retrieve(_ context.Context, queries []string) ([][]Doc, error) {
	r.batches = append(r.batches, slices.Clone(queries))
	out := make([][]Doc, len(queries))
	for i, q := range queries {
		out[i] = docsFor(q)
	}
	return out, nil
}

func docsFor(q string) []Doc {
	return []Doc{{ID: "d-" + q, Contents: "\"" + q + "\"\nabout " + q}}
}

// trajectory is one script and what the environment should answer to each turn.
type step struct {
	response string
	mem      string // expected memory block text, "" if none is kept
	act      string // expected action block text, "" if none
	obs      string // expected observation text, "" after the final turn
}

func searchStep(m, q string) step {
	return step{"<mem>" + m + "</mem><think>t</think><search>" + q + "</search>", "<mem>" + m + "</mem>", "<search>" + q + "</search>", Default().Observation(docsFor(q))}
}

// want builds the expected context of turn t from text alone (the test tokenizer is
// context-free, so text pieces encode to the exact generated sub-slices).
func want(tok byteTok, policy ContextPolicy, prompt string, steps []step, t int) []int32 {
	ids := tok.Encode(prompt)
	switch {
	case t == 0:
	case policy == Full:
		for _, s := range steps[:t] {
			ids = append(ids, tok.Encode(s.response+s.obs)...)
		}
	case policy == Mem1:
		ids = append(ids, tok.Encode(steps[t-1].response+steps[t-1].obs)...)
	default:
		s := steps[t-1]
		ids = append(ids, tok.Encode(s.mem+s.act+s.obs)...)
	}
	return ids
}

func TestEpisodeContexts(t *testing.T) {
	p := Default()
	lastNote := p.LastTurn
	searchThenAnswer := []step{
		searchStep("nothing yet", "ax founder"),
		{"<mem>ax founder: Bo</mem><think>t</think>oops", "<mem>ax founder: Bo</mem>", "", p.Invalid},
		searchStep("ax founder: Bo", "bo born"),
		{"<mem>Bo born 1950</mem><think>done</think><answer>1950</answer>", "", "", ""},
	}
	truncated := []step{
		{truncatedText, "<mem>cut</mem>", "", p.Invalid}, // a well-formed memory survives
		{"<mem>m</mem><think>t</think><answer>x</answer>", "", "", ""},
	}
	maxTurns := []step{
		searchStep("a", "q1"),
		searchStep("b", "q2"),
		{"<mem>c</mem><think>t</think><search>q3</search>", "", "", ""},
	}
	maxTurns[1].obs += lastNote // the observation before the last turn carries the instruction

	for _, policy := range []ContextPolicy{Mempo, Mem1, Full} {
		t.Run(string(policy), func(t *testing.T) {
			tok := tagTok(p)
			cfg := Config{Context: policy, MaxTurns: 3}
			cases := []struct {
				name   string
				steps  []step
				finish Finish
				answer string
			}{
				{"search invalid answer", searchThenAnswer, Stop, "1950"},
				{"truncated then answer", truncated, Stop, "x"},
				{"max turns", maxTurns, MaxTurns, ""},
			}
			gen := &scripted{tok: tok, scripts: map[*Episode][]string{}}
			var eps []*Episode
			for i, c := range cases {
				c := c
				mt := cfg
				if len(c.steps) > mt.MaxTurns {
					mt.MaxTurns = len(c.steps) + 1 // no last-turn note inside this script
				}
				e, err := NewEpisode(p, nil, tok, mt, fmt.Sprintf("question %d", i), 1)
				if err != nil {
					t.Fatal(err)
				}
				var script []string
				for _, s := range c.steps {
					script = append(script, s.response)
				}
				gen.scripts[e] = script
				eps = append(eps, e)
			}
			ret := &fakeRetriever{}
			if err := Run(context.Background(), eps, gen, ret); err != nil {
				t.Fatalf("Run() = %v", err)
			}
			if gen.calls != 4 {
				t.Errorf("Generate called %d times, want 4 (one per round for the batch)", gen.calls)
			}
			if diff := cmp.Diff([][]string{{"ax founder", "q1"}, {"q2"}, {"bo born"}}, ret.batches); diff != "" {
				t.Errorf("retrieval batches (-want +got):\n%s", diff)
			}
			for i, c := range cases {
				e := eps[i]
				prompt := p.Prompt(fmt.Sprintf("question %d", i), 1)
				recs := e.Records()
				if len(recs) != len(c.steps) {
					t.Fatalf("%s: %d records, want %d", c.name, len(recs), len(c.steps))
				}
				tt, pt := 0, 0
				for j, r := range recs {
					w := want(tok, policy, prompt, c.steps, j)
					if diff := cmp.Diff(w, r.Context.IDs()); diff != "" {
						t.Errorf("%s turn %d context (-want +got):\n%s", c.name, j, diff)
					}
					if diff := cmp.Diff(want(tok, Full, prompt, c.steps, j), fullHistory(e, j).IDs()); diff != "" {
						t.Errorf("%s turn %d full history (-want +got):\n%s", c.name, j, diff)
					}
					if r.Observation != c.steps[j].obs {
						t.Errorf("%s turn %d observation = %q, want %q", c.name, j, r.Observation, c.steps[j].obs)
					}
					tt += len(w) + len(r.Response)
					pt = max(pt, len(w)+len(r.Response))
				}
				if e.Finish() != c.finish {
					t.Errorf("%s: Finish() = %q, want %q", c.name, e.Finish(), c.finish)
				}
				if got, ok := e.Answer(); got != c.answer || ok != (c.answer != "") {
					t.Errorf("%s: Answer() = %q, %v, want %q", c.name, got, ok, c.answer)
				}
				if e.TT() != tt || e.PT() != pt {
					t.Errorf("%s: TT, PT = %d, %d, want %d, %d", c.name, e.TT(), e.PT(), tt, pt)
				}
			}
			if got := eps[1].Records()[0].Finish; got != Length {
				t.Errorf("truncated turn finish = %q, want length", got)
			}
		})
	}
}

func TestMempoContextStaysFlat(t *testing.T) {
	p := Default()
	tok := tagTok(p)
	pts := map[ContextPolicy]int{}
	for _, policy := range []ContextPolicy{Mempo, Full} {
		e, err := NewEpisode(p, nil, tok, Config{Context: policy, MaxTurns: 16}, "q", 1)
		if err != nil {
			t.Fatal(err)
		}
		var script []string
		for i := range 10 {
			script = append(script, fmt.Sprintf("<mem>m</mem><think>thinking at length %d</think><search>q%d</search>", i, i%2))
		}
		script = append(script, "<mem>m</mem><think>t</think><answer>a</answer>")
		gen := &scripted{tok: tok, scripts: map[*Episode][]string{e: script}}
		if err := Run(context.Background(), []*Episode{e}, gen, &fakeRetriever{}); err != nil {
			t.Fatal(err)
		}
		pts[policy] = e.PT()
		recs := e.Records()
		for i := 2; i < len(recs); i++ {
			prev, cur := recs[i-1].Context.Len(), recs[i].Context.Len()
			if policy == Mempo && cur != prev {
				t.Errorf("mempo context at turn %d = %d tokens, at turn %d = %d, want equal", i-1, prev, i, cur)
			}
			if policy == Full && cur <= prev+len(recs[i-1].Response) {
				t.Errorf("full context at turn %d = %d tokens, at turn %d = %d, want growth by a response and an observation", i-1, prev, i, cur)
			}
		}
	}
	if pts[Full] <= pts[Mempo] {
		t.Errorf("PT full = %d, mempo = %d: want full above mempo", pts[Full], pts[Mempo])
	}
}

func TestEpisodeMisuse(t *testing.T) {
	p := Default()
	tok := tagTok(p)
	e, err := NewEpisode(p, nil, tok, DefaultConfig(), "q", 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Observe(nil); !errors.Is(err, ErrEpisode) {
		t.Errorf("Observe() before a search = %v, want ErrEpisode", err)
	}
	if err := e.Step(Generation{IDs: tok.Encode("<mem>m</mem><think>t</think><search>q</search>")}); err != nil {
		t.Fatal(err)
	}
	if err := e.Step(Generation{IDs: tok.Encode("x")}); !errors.Is(err, ErrEpisode) {
		t.Errorf("Step() before the observation = %v, want ErrEpisode", err)
	}
	if err := e.Observe(nil); err != nil {
		t.Fatal(err)
	}
	if err := e.Step(Generation{IDs: []int32{1, 2}, Logprobs: []float32{0}}); !errors.Is(err, ErrEpisode) {
		t.Errorf("Step() with 1 log-prob for 2 ids = %v, want ErrEpisode", err)
	}
	if err := e.Step(Generation{IDs: tok.Encode("<mem>m</mem><think>t</think><answer>a</answer>")}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Context(); !errors.Is(err, ErrEpisode) {
		t.Errorf("Context() after the answer = %v, want ErrEpisode", err)
	}
	for _, cfg := range []Config{{Context: "rag", MaxTurns: 4}, {Context: Mempo, MaxTurns: 0}} {
		if _, err := NewEpisode(p, nil, tok, cfg, "q", 1); err == nil {
			t.Errorf("NewEpisode(%+v) = nil error", cfg)
		}
	}
}

func TestMempoKeepsStraddlingTokenOnce(t *testing.T) {
	// One token holds "</mem><search>": it is in both spans and kept once.
	p := Default()
	p.Think = Tag{}
	tok := newByteTok("<mem>", "</mem><search>", "</search>")
	e, err := NewEpisode(p, nil, tok, Config{Context: Mempo, MaxTurns: 4}, "q", 1)
	if err != nil {
		t.Fatal(err)
	}
	resp := tok.Encode("<mem>m</mem><search>q</search>")
	if err := e.Step(Generation{IDs: resp}); err != nil {
		t.Fatal(err)
	}
	if err := e.Observe(nil); err != nil {
		t.Fatal(err)
	}
	ctx, err := e.Context()
	if err != nil {
		t.Fatal(err)
	}
	var kept []int32
	for _, s := range ctx {
		if s.Source == FromMemory || s.Source == FromAction {
			kept = append(kept, s.IDs...)
		}
	}
	if diff := cmp.Diff(resp, kept); diff != "" {
		t.Errorf("kept ids (-want +got):\n%s", diff)
	}
}

// fullHistory is the un-pruned context before turn t — prompt, every earlier response and
// observation — whatever the policy: the memory pass's context_full (DESIGN.md §7).
func fullHistory(e *Episode, t int) Context {
	t = min(max(t, 0), len(e.recs))
	return build(Full, e.prompt, e.recs, t)
}
