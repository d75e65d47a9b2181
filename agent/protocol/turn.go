package protocol

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode"
)

// Kind is what a turn does.
type Kind string

const (
	Search  Kind = "search"
	Answer  Kind = "answer"
	Invalid Kind = "invalid"
)

// Span is a half-open range [Start, End). The empty span {0, 0} means "none".
type Span struct {
	Start int `json:"start"`
	End   int `json:"end"`
}

// Empty reports whether the span covers nothing.
func (s Span) Empty() bool { return s.End <= s.Start }

// Len is the number of positions covered.
func (s Span) Len() int {
	if s.Empty() {
		return 0
	}
	return s.End - s.Start
}

// The failures of a turn that is not valid, in the order of the turn format (memory,
// thought, action): where the response first leaves the strict format. The strict parser
// records one in Turn.Failure; Protocol.Failure gives it for any protocol.
const (
	FailNoMemOpen       = "no-mem-open"       // does not start with the memory's open tag
	FailMemUnclosed     = "mem-unclosed"      // the memory is never closed
	FailNoThink         = "no-think"          // no thought block right after the memory
	FailThinkUnclosed   = "think-unclosed"    // the thought is never closed
	FailNoAction        = "no-action"         // no search or answer after the thought
	FailSearchUnclosed  = "search-unclosed"   // <search> never closed
	FailAnswerUnclosed  = "answer-unclosed"   // <answer> never closed
	FailTextAfterAction = "text-after-action" // text after the closed action
	FailEmptyQuery      = "empty-query"       // an empty or unparsable search
)

// Failures lists the failures in format order.
var Failures = []string{FailNoMemOpen, FailMemUnclosed, FailNoThink, FailThinkUnclosed, FailNoAction,
	FailSearchUnclosed, FailAnswerUnclosed, FailTextAfterAction, FailEmptyQuery}

// Turn is a parsed response.
type Turn struct {
	Kind Kind
	// Arg is the search query or the answer text, trimmed.
	Arg string
	// Memory is the memory block's content, trimmed; HasMemory tells an empty block from
	// a missing one.
	Memory    string
	HasMemory bool
	// Reason says why the turn is invalid; empty otherwise.
	Reason string
	// Failure is where an invalid turn leaves the strict format (FailNoMemOpen...); the
	// lenient parser leaves it empty.
	Failure string
	// MemBytes and ActBytes are byte spans in the response text, tags included.
	MemBytes Span
	ActBytes Span
	// MemTokens and ActTokens are the same spans in response tokens; only ParseTokens
	// fills them.
	MemTokens Span
	ActTokens Span
}

// ParseText parses a response text. A memory block that is well formed is reported even
// when the turn is invalid, so the mempo context can keep it.
func (p *Protocol) ParseText(s string) Turn {
	if p.Lenient {
		return p.parseLenient(s)
	}
	return p.parseStrict(s)
}

// block finds the open tag at pos (after whitespace) and its close. It returns the span
// and the inner text; ok is false when the block does not start at pos or is unclosed.
func block(s string, pos int, tag Tag) (span Span, inner string, ok bool) {
	if !strings.HasPrefix(s[pos:], tag.Open) {
		return Span{}, "", false
	}
	from := pos + len(tag.Open)
	i := strings.Index(s[from:], tag.Close)
	if i < 0 {
		return Span{}, "", false
	}
	return Span{pos, from + i + len(tag.Close)}, s[from : from+i], true
}

func skipSpace(s string, pos int) int {
	for pos < len(s) {
		r := rune(s[pos])
		if r >= 0x80 || !unicode.IsSpace(r) {
			break
		}
		pos++
	}
	return pos
}

func (p *Protocol) parseStrict(s string) Turn {
	var t Turn
	pos := skipSpace(s, 0)
	if !p.Memory.absent() {
		span, inner, ok := block(s, pos, p.Memory)
		if !ok {
			t.Failure = opened(s, pos, p.Memory, FailNoMemOpen, FailMemUnclosed)
			return p.invalid(t, fmt.Sprintf("the turn does not start with a closed %s block", p.Memory.Open))
		}
		t.MemBytes, t.Memory, t.HasMemory = span, strings.TrimSpace(inner), true
		pos = skipSpace(s, span.End)
	}
	if !p.Think.absent() {
		span, _, ok := block(s, pos, p.Think)
		if !ok {
			t.Failure = opened(s, pos, p.Think, FailNoThink, FailThinkUnclosed)
			return p.invalid(t, fmt.Sprintf("no closed %s block at byte %d", p.Think.Open, pos))
		}
		pos = skipSpace(s, span.End)
	}
	var kind Kind
	var tag Tag
	unclosed := FailSearchUnclosed
	switch {
	case strings.HasPrefix(s[pos:], p.Search.Open):
		kind, tag = Search, p.Search
	case strings.HasPrefix(s[pos:], p.Answer.Open):
		kind, tag, unclosed = Answer, p.Answer, FailAnswerUnclosed
	default:
		t.Failure = FailNoAction
		return p.invalid(t, fmt.Sprintf("no %s or %s at byte %d", p.Search.Open, p.Answer.Open, pos))
	}
	span, inner, ok := block(s, pos, tag)
	if !ok {
		t.Failure = unclosed
		return p.invalid(t, fmt.Sprintf("%s is not closed", tag.Open))
	}
	if rest := p.trimTrailing(s[span.End:]); rest != "" {
		t.Failure = FailTextAfterAction
		return p.invalid(t, fmt.Sprintf("text after the action: %.20q", rest))
	}
	if t = p.action(t, kind, span, inner); t.Kind == Invalid {
		t.Failure = FailEmptyQuery
	}
	return t
}

// opened is missing when s does not open tag at pos, else unclosed: the failure of a
// block that block did not find.
func opened(s string, pos int, tag Tag, missing, unclosed string) string {
	if strings.HasPrefix(s[pos:], tag.Open) {
		return unclosed
	}
	return missing
}

// Failure says where response s first leaves the strict turn format (memory, thought,
// one action) — one of Failures — or "" when it keeps it, whether or not p parses
// leniently: what went wrong with a turn, for an audit.
func (p *Protocol) Failure(s string) string { return p.parseStrict(s).Failure }

// trimTrailing removes whitespace and the allowed end-of-turn markers.
func (p *Protocol) trimTrailing(rest string) string {
	for {
		before := rest
		rest = strings.TrimSpace(rest)
		for _, tr := range p.Trailing {
			if tr != "" {
				rest = strings.TrimPrefix(rest, tr)
			}
		}
		if rest == before {
			return rest
		}
	}
}

// parseLenient follows Search-R1's postprocess_predictions: the leftmost complete
// <search>…</search> or <answer>…</answer>, whatever surrounds it.
func (p *Protocol) parseLenient(s string) Turn {
	var t Turn
	kind, span, inner := Invalid, Span{}, ""
	for pos := 0; pos < len(s); pos++ {
		if sp, in, ok := block(s, pos, p.Search); ok {
			kind, span, inner = Search, sp, in
			break
		}
		if sp, in, ok := block(s, pos, p.Answer); ok {
			kind, span, inner = Answer, sp, in
			break
		}
	}
	limit := len(s)
	if kind != Invalid {
		limit = span.Start
	}
	if !p.Memory.absent() {
		if i := strings.Index(s[:limit], p.Memory.Open); i >= 0 {
			if sp, in, ok := block(s[:limit], i, p.Memory); ok {
				t.MemBytes, t.Memory, t.HasMemory = sp, strings.TrimSpace(in), true
			}
		}
	}
	if kind == Invalid {
		return p.invalid(t, fmt.Sprintf("no complete %s or %s block", p.Search.Open, p.Answer.Open))
	}
	return p.action(t, kind, span, inner)
}

func (p *Protocol) invalid(t Turn, reason string) Turn {
	t.Kind, t.Reason, t.ActBytes = Invalid, reason, Span{}
	return t
}

func (p *Protocol) action(t Turn, kind Kind, span Span, inner string) Turn {
	arg := strings.TrimSpace(inner)
	if kind == Search {
		if p.SearchJSON != "" {
			q, err := jsonString(arg, p.SearchJSON)
			if err != nil {
				return p.invalid(t, fmt.Sprintf("search call: %v", err))
			}
			arg = strings.TrimSpace(q)
		}
		if arg == "" {
			return p.invalid(t, "empty search query")
		}
	}
	t.Kind, t.Arg, t.ActBytes = kind, arg, span
	return t
}

// jsonString walks a dotted path through a JSON object to a string value.
func jsonString(text, path string) (string, error) {
	var v any
	if err := json.Unmarshal([]byte(text), &v); err != nil {
		return "", fmt.Errorf("not JSON: %w", err)
	}
	for _, key := range strings.Split(path, ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return "", fmt.Errorf("path %q: %q is not inside an object", path, key)
		}
		if v, ok = m[key]; !ok {
			return "", fmt.Errorf("path %q: key %q missing", path, key)
		}
	}
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("path %q: value is %T, want string", path, v)
	}
	return s, nil
}

// Decoder turns token ids back into text. A byte-level tokenizer must return the raw
// bytes of each token, with no replacement characters, so that decoding tokens one by
// one and joining the pieces gives the text of the whole sequence.
type Decoder interface {
	Decode(ids []int32) string
}

// Pieces decodes each token on its own: the text the parser sees for token i.
func Pieces(dec Decoder, ids []int32) []string {
	pieces := make([]string, len(ids))
	for i, id := range ids {
		pieces[i] = dec.Decode([]int32{id})
	}
	return pieces
}

// ParseTokens parses the text formed by joining pieces (one per response token) and
// maps the memory and action spans to token spans with TokenSpan.
func (p *Protocol) ParseTokens(pieces []string) Turn {
	t := p.ParseText(strings.Join(pieces, ""))
	t.MemTokens = TokenSpan(pieces, t.MemBytes)
	t.ActTokens = TokenSpan(pieces, t.ActBytes)
	return t
}

// TokenSpan maps a byte span of the joined pieces to the smallest token span covering it.
// The rule for a tag split mid-token: a token belongs to the span when any of its bytes
// does. So a token holding both "</mem>" and the start of "<think>" is inside the memory
// span (it carries the memory advantage), and a token straddling two spans belongs to
// both. Tokens with no bytes never start or end a span. An empty byte span maps to {0, 0}.
func TokenSpan(pieces []string, b Span) Span {
	if b.Empty() {
		return Span{}
	}
	start, end, off := -1, -1, 0
	for i, piece := range pieces {
		lo, hi := off, off+len(piece)
		off = hi
		if lo < b.End && hi > b.Start {
			if start < 0 {
				start = i
			}
			end = i + 1
		}
	}
	if start < 0 {
		return Span{}
	}
	return Span{start, end}
}

// Render writes one turn in this format: memory, thought, then the action. With
// SearchJSON set, the query is written as the JSON function call the path describes.
func (p *Protocol) Render(memory, thought string, kind Kind, arg string) string {
	var b strings.Builder
	if !p.Memory.absent() {
		b.WriteString(p.Memory.Open + memory + p.Memory.Close)
	}
	if !p.Think.absent() {
		b.WriteString(p.Think.Open + thought + p.Think.Close)
	}
	switch kind {
	case Search:
		if p.SearchJSON != "" {
			arg = jsonCall(p.SearchJSON, arg)
		}
		b.WriteString(p.Search.Open + arg + p.Search.Close)
	case Answer:
		b.WriteString(p.Answer.Open + arg + p.Answer.Close)
	}
	return b.String()
}

// jsonCall builds {"name": "search", …path…: query} for a dotted path.
func jsonCall(path, query string) string {
	keys := strings.Split(path, ".")
	var v any = query
	for i := len(keys) - 1; i >= 0; i-- {
		v = map[string]any{keys[i]: v}
	}
	m := v.(map[string]any)
	if _, ok := m["name"]; !ok {
		m["name"] = "search"
	}
	out, _ := json.Marshal(m) // maps of strings always marshal
	return string(out)
}
