package protocol

import (
	"math/rand/v2"
	"strings"
	"testing"
)

func TestParseText(t *testing.T) {
	mem1 := Default()
	mem1.Memory, mem1.Think = Tag{"<think>", "</think>"}, Tag{}
	lenient := Default()
	lenient.Lenient = true
	tool := Default()
	tool.Search, tool.SearchJSON = Tag{"<tool_call>", "</tool_call>"}, "arguments.query"

	tests := []struct {
		name     string
		p        *Protocol
		in       string
		kind     Kind
		arg      string
		memory   string
		hasMem   bool
		memBytes Span
	}{
		{"search", Default(), "<mem>a</mem><think>b</think><search> q x </search>", Search, "q x", "a", true, Span{0, 12}},
		{"answer with spaces", Default(), "  <mem> a </mem>\n<think>b</think>\n<answer>x; y</answer>", Answer, "x; y", "a", true, Span{2, 16}},
		{"trailing end token", Default(), "<mem></mem><think></think><answer>x</answer>\n<|im_end|>", Answer, "x", "", true, Span{0, 11}},
		{"missing memory", Default(), "<think>b</think><search>q</search>", Invalid, "", "", false, Span{}},
		{"missing think keeps memory", Default(), "<mem>a</mem><search>q</search>", Invalid, "", "a", true, Span{0, 12}},
		{"unclosed memory", Default(), "<mem>a<think>b</think><search>q</search>", Invalid, "", "", false, Span{}},
		{"no action", Default(), "<mem>a</mem><think>b</think>so", Invalid, "", "a", true, Span{0, 12}},
		{"unclosed action", Default(), "<mem>a</mem><think>b</think><search>q", Invalid, "", "a", true, Span{0, 12}},
		{"text after action", Default(), "<mem>a</mem><think>b</think><search>q</search>more", Invalid, "", "a", true, Span{0, 12}},
		{"empty query", Default(), "<mem>a</mem><think>b</think><search>  </search>", Invalid, "", "a", true, Span{0, 12}},
		{"empty answer is an answer", Default(), "<mem>a</mem><think>b</think><answer></answer>", Answer, "", "a", true, Span{0, 12}},
		{"mem1 memory is think", mem1, "<think>facts</think><search>q</search>", Search, "q", "facts", true, Span{0, 20}},
		{"lenient search-r1", lenient, "I think <search>q</search> junk", Search, "q", "", false, Span{}},
		{"lenient first complete block", lenient, "<search>a <answer>b</answer>", Answer, "b", "", false, Span{}},
		{"lenient memory before action", lenient, "x<mem>m</mem><answer>b</answer>", Answer, "b", "m", true, Span{1, 13}},
		{"lenient none", lenient, "<search>open", Invalid, "", "", false, Span{}},
		{"tool call", tool, `<mem>a</mem><think>b</think><tool_call>{"name":"search","arguments":{"query":"q z"}}</tool_call>`, Search, "q z", "a", true, Span{0, 12}},
		{"tool call bad json", tool, `<mem>a</mem><think>b</think><tool_call>{"name":</tool_call>`, Invalid, "", "a", true, Span{0, 12}},
		{"tool call missing key", tool, `<mem>a</mem><think>b</think><tool_call>{"arguments":{}}</tool_call>`, Invalid, "", "a", true, Span{0, 12}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.p.ParseText(tt.in)
			if got.Kind != tt.kind || got.Arg != tt.arg || got.Memory != tt.memory || got.HasMemory != tt.hasMem || got.MemBytes != tt.memBytes {
				t.Errorf("ParseText(%q) = %+v, want kind %s arg %q memory %q (%v) span %v", tt.in, got, tt.kind, tt.arg, tt.memory, tt.hasMem, tt.memBytes)
			}
			if (got.Kind == Invalid) != (got.Reason != "") {
				t.Errorf("ParseText(%q): kind %s with reason %q", tt.in, got.Kind, got.Reason)
			}
		})
	}
}

func TestTokenSpan(t *testing.T) {
	tests := []struct {
		name   string
		pieces []string
		b      Span
		want   Span
	}{
		{"aligned", []string{"<mem>", "a", "</mem>", "<think>"}, Span{0, 12}, Span{0, 3}},
		{"close split mid-token", []string{"<me", "m>a</", "mem><th", "ink>"}, Span{0, 12}, Span{0, 3}},
		{"start mid-token", []string{" <", "mem>a</mem>"}, Span{1, 13}, Span{0, 2}},
		{"empty pieces skipped", []string{"", "<mem>a</mem>", "", "x"}, Span{0, 12}, Span{1, 2}},
		{"empty span", []string{"abc"}, Span{}, Span{}},
		{"out of range", []string{"abc"}, Span{5, 9}, Span{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := TokenSpan(tt.pieces, tt.b); got != tt.want {
				t.Errorf("TokenSpan(%q, %v) = %v, want %v", tt.pieces, tt.b, got, tt.want)
			}
		})
	}
}

func TestParseTokensSpecialAndSplitTags(t *testing.T) {
	p := Default()
	text := "<mem>ab</mem><think>c</think><search>q</search>"
	for _, tok := range []byteTok{tagTok(p), newByteTok()} {
		ids := tok.Encode(text)
		got := p.ParseTokens(Pieces(tok, ids))
		if got.Kind != Search {
			t.Fatalf("ParseTokens(%v) kind = %s, want search", ids, got.Kind)
		}
		if mem := tok.Decode(ids[got.MemTokens.Start:got.MemTokens.End]); mem != "<mem>ab</mem>" {
			t.Errorf("memory tokens decode to %q, want %q", mem, "<mem>ab</mem>")
		}
		if act := tok.Decode(ids[got.ActTokens.Start:got.ActTokens.End]); act != "<search>q</search>" {
			t.Errorf("action tokens decode to %q, want %q", act, "<search>q</search>")
		}
	}
}

func TestRenderRoundTrip(t *testing.T) {
	tool := Default()
	tool.Search, tool.SearchJSON = Tag{"<tool_call>", "</tool_call>"}, "arguments.query"
	for _, p := range []*Protocol{Default(), tool} {
		for _, c := range []struct {
			kind Kind
			arg  string
		}{{Search, "who founded Ax"}, {Answer, "Ax; 1987"}} {
			s := p.Render("fact: 1", "go", c.kind, c.arg)
			got := p.ParseText(s)
			if got.Kind != c.kind || got.Arg != c.arg || got.Memory != "fact: 1" {
				t.Errorf("ParseText(Render(%s, %q)) = %+v", c.kind, c.arg, got)
			}
		}
	}
}

// cut splits s into pieces at positions drawn from seed, sometimes inside tags.
func cut(s string, seed uint64) []string {
	r := rand.New(rand.NewPCG(seed, 1))
	var pieces []string
	for len(s) > 0 {
		n := min(len(s), r.IntN(6)) // 0 makes empty pieces too
		pieces = append(pieces, s[:n])
		s = s[n:]
	}
	return pieces
}

func checkTokenSpan(t *testing.T, pieces []string, b, tok Span, what string) {
	t.Helper()
	if b.Empty() {
		if tok != (Span{}) {
			t.Fatalf("%s: empty byte span mapped to %v", what, tok)
		}
		return
	}
	if tok.Start < 0 || tok.End > len(pieces) || tok.Empty() {
		t.Fatalf("%s: token span %v out of [0,%d]", what, tok, len(pieces))
	}
	lo := len(strings.Join(pieces[:tok.Start], ""))
	hi := len(strings.Join(pieces[:tok.End], ""))
	if lo > b.Start || hi < b.End {
		t.Fatalf("%s: tokens %v cover bytes [%d,%d), not %v", what, tok, lo, hi, b)
	}
	// Minimal: the first and last tokens hold bytes of the span.
	if lo+len(pieces[tok.Start]) <= b.Start || hi-len(pieces[tok.End-1]) >= b.End {
		t.Fatalf("%s: tokens %v are not the smallest cover of %v", what, tok, b)
	}
}

func FuzzParseTokens(f *testing.F) {
	for _, s := range []string{
		"<mem>a</mem><think>b</think><search>q</search>",
		"<mem>a</mem><think>b</think><answer>x; y</answer><|im_end|>",
		"<mem><mem></mem></mem><think><search></think><search>q</search>",
		"<mem>a</mem> <think></think>\n<answer></answer>",
		"<search>q</search><mem>",
		"\xff<mem>\x00</mem>",
	} {
		f.Add(s, uint64(len(s)), false)
	}
	f.Fuzz(func(t *testing.T, s string, seed uint64, lenient bool) {
		p := Default()
		p.Lenient = lenient
		pieces := cut(s, seed)
		got := p.ParseTokens(pieces)
		switch got.Kind {
		case Search, Answer:
			a := got.ActBytes
			if a.Start < 0 || a.End > len(s) || a.Empty() {
				t.Fatalf("action span %v out of [0,%d]", a, len(s))
			}
			tag := p.Search
			if got.Kind == Answer {
				tag = p.Answer
			}
			body := s[a.Start:a.End]
			if !strings.HasPrefix(body, tag.Open) || !strings.HasSuffix(body, tag.Close) || len(body) < len(tag.Open)+len(tag.Close) {
				t.Fatalf("action span %q is not a %s block", body, tag.Open)
			}
			if inner := strings.TrimSpace(body[len(tag.Open) : len(body)-len(tag.Close)]); inner != got.Arg {
				t.Fatalf("Arg = %q, want the block's content %q", got.Arg, inner)
			}
		case Invalid:
			if got.Reason == "" || !got.ActBytes.Empty() {
				t.Fatalf("invalid turn with reason %q and action span %v", got.Reason, got.ActBytes)
			}
		default:
			t.Fatalf("Kind = %q", got.Kind)
		}
		if got.HasMemory {
			m := got.MemBytes
			if m.Start < 0 || m.End > len(s) {
				t.Fatalf("memory span %v out of [0,%d]", m, len(s))
			}
			body := s[m.Start:m.End]
			if !strings.HasPrefix(body, "<mem>") || !strings.HasSuffix(body, "</mem>") {
				t.Fatalf("memory span %q is not a <mem> block", body)
			}
			if !got.ActBytes.Empty() && m.End > got.ActBytes.Start {
				t.Fatalf("memory span %v overlaps the action %v", m, got.ActBytes)
			}
		} else if !got.MemBytes.Empty() {
			t.Fatalf("no memory but span %v", got.MemBytes)
		}
		checkTokenSpan(t, pieces, got.MemBytes, got.MemTokens, "memory")
		checkTokenSpan(t, pieces, got.ActBytes, got.ActTokens, "action")

		// Round trip: any tag-free text rendered as a turn parses back to itself.
		clean := strings.TrimSpace(strings.NewReplacer("<", "", ">", "", ";", "").Replace(s))
		if clean != "" {
			for _, kind := range []Kind{Search, Answer} {
				r := p.ParseText(p.Render(clean, clean, kind, clean))
				if r.Kind != kind || r.Arg != clean || r.Memory != clean {
					t.Fatalf("ParseText(Render(%q, %s)) = %+v", clean, kind, r)
				}
			}
		}
	})
}

// TestFailure: where a response first leaves the strict format.
func TestFailure(t *testing.T) {
	p := Default()
	tests := []struct{ response, want string }{
		{"<mem>a</mem><think>b</think><search>q</search>", ""},
		{" <mem>a</mem>\n<think>b</think><answer>x; y</answer><|im_end|>", ""},
		{`Doc 2(Title: "Ann") Ann works as a pilot.`, FailNoMemOpen},
		{"<mem>Ann was born in the city of</search>", FailMemUnclosed},
		{"<mem>Kalou<|im_start|>assistant\n<mem>Ann was born", FailMemUnclosed},
		{"<mem>a</mem><search>q</search>", FailNoThink},
		{"<mem>a</mem><think>b\nDoc 2(Title: x)", FailThinkUnclosed},
		{"<mem>a</mem><think>b</think>so the answer", FailNoAction},
		{"<mem>a</mem><think>b</think><search>q", FailSearchUnclosed},
		{"<mem>a</mem><think>b</think><answer>x;", FailAnswerUnclosed},
		{"<mem>a</mem><think>b</think><search>q</search> and more", FailTextAfterAction},
		{"<mem>a</mem><think>b</think><search> </search>", FailEmptyQuery},
	}
	for _, tt := range tests {
		got := p.Failure(tt.response)
		if got != tt.want {
			t.Errorf("Failure(%q) = %q, want %q", tt.response, got, tt.want)
		}
		// Every response Failure calls valid, the protocol's parser does too, and
		// the other way round.
		if valid := p.ParseText(tt.response).Kind != Invalid; valid != (got == "") {
			t.Errorf("%q: parser valid = %v, Failure %q", tt.response, valid, got)
		}
	}
}
