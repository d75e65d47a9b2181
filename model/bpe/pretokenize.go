package bpe

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/dlclark/regexp2"
	"golang.org/x/text/unicode/norm"
)

// Qwen2Pattern is the Split pre-tokenizer regex of Qwen2, Qwen2.5 and Qwen3, verbatim from
// their tokenizer.json. Train uses it; Load takes whatever pattern the file holds.
const Qwen2Pattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`

// gpt2Pattern is what HF's ByteLevel pre-tokenizer splits with when use_regex is true.
const gpt2Pattern = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`

// compilePattern compiles an HF pre-tokenizer regex with regexp2, the backtracking engine
// that supports the (?!\S) lookahead Go's regexp lacks.
//
// The options are regexp2's default (.NET) syntax, not regexp2.RE2: RE2 mode narrows \s
// to ASCII [\t\n\f\r ], while HF tokenizers (Oniguruma) and regexp2's default use
// Unicode White_Space. Measured: with RE2, TestGoldenEncode fails on exactly the goldens
// "a\u00a0\u00a0b" and "  \u3000  ".
//
// No match timeout is set, since a timeout would make Encode's output depend on machine
// load. The patterns backtrack at most over one run of whitespace per match (the \s* and
// \s+ branches), so matching stays linear in the input; TestPathologicalInputs runs
// long runs through it.
func compilePattern(pattern string) (*regexp2.Regexp, error) {
	return regexp2.Compile(pattern, regexp2.None)
}

// byteRune is GPT-2's reversible map from bytes to printable runes (bytes_to_unicode):
// printable Latin-1 bytes map to themselves, the other 68 to U+0100 onwards.
var byteRune, runeByte = func() ([256]rune, map[rune]byte) {
	var fwd [256]rune
	back := make(map[rune]byte, 256)
	next := rune(256)
	for b := 0; b < 256; b++ {
		r := rune(b)
		if !(b >= '!' && b <= '~' || b >= 0xa1 && b <= 0xac || b >= 0xae) {
			r = next
			next++
		}
		fwd[b] = r
		back[r] = byte(b)
	}
	return fwd, back
}()

// byteLevel maps raw bytes to their byte-level token string.
func byteLevel(s string) string {
	var b strings.Builder
	b.Grow(2 * len(s))
	for i := 0; i < len(s); i++ {
		b.WriteRune(byteRune[s[i]])
	}
	return b.String()
}

// unByteLevel inverts byteLevel as HF's ByteLevel decoder does: a token with a rune
// outside the map decodes to its own UTF-8 bytes.
func unByteLevel(tok string) string {
	out := make([]byte, 0, len(tok))
	for _, r := range tok {
		b, ok := runeByte[r]
		if !ok {
			return tok
		}
		out = append(out, b)
	}
	return string(out)
}

// normalizer is a chain of Unicode normal forms (HF's NFC/NFD/NFKC/NFKD and Sequence).
type normalizer []norm.Form

func (n normalizer) apply(s string) string {
	for _, f := range n {
		s = f.String(s)
	}
	return s
}

type typed struct {
	Type string `json:"type"`
}

func isNull(raw json.RawMessage) bool {
	s := strings.TrimSpace(string(raw))
	return s == "" || s == "null"
}

// parseNormalizer reads the "normalizer" section; field is its JSON path for errors.
func parseNormalizer(raw json.RawMessage, field string) (normalizer, error) {
	if isNull(raw) {
		return nil, nil
	}
	var t typed
	if err := json.Unmarshal(raw, &t); err != nil {
		return nil, fmt.Errorf("%s: %w: %w", field, err, ErrFormat)
	}
	forms := map[string]norm.Form{"NFC": norm.NFC, "NFD": norm.NFD, "NFKC": norm.NFKC, "NFKD": norm.NFKD}
	if f, ok := forms[t.Type]; ok {
		return normalizer{f}, nil
	}
	if t.Type != "Sequence" {
		return nil, fmt.Errorf("%s.type: %q, want NFC, NFD, NFKC, NFKD or Sequence: %w", field, t.Type, ErrUnsupported)
	}
	var seq struct {
		Normalizers []json.RawMessage `json:"normalizers"`
	}
	if err := json.Unmarshal(raw, &seq); err != nil {
		return nil, fmt.Errorf("%s: %w: %w", field, err, ErrFormat)
	}
	var out normalizer
	for i, sub := range seq.Normalizers {
		n, err := parseNormalizer(sub, fmt.Sprintf("%s.normalizers[%d]", field, i))
		if err != nil {
			return nil, err
		}
		out = append(out, n...)
	}
	return out, nil
}

// preStep is one pre-tokenizer of a Sequence: an optional space prepended to every piece
// (ByteLevel's add_prefix_space), then an optional regex split with Isolated behaviour.
// The ByteLevel byte-to-rune mapping itself happens in the BPE model.
type preStep struct {
	prefixSpace bool
	re          *regexp2.Regexp
}

type preTokenizer []preStep

// parsePreTokenizer reads the "pre_tokenizer" section; field is its JSON path for errors.
func parsePreTokenizer(raw json.RawMessage, field string) (preTokenizer, error) {
	if isNull(raw) {
		return nil, nil
	}
	var t typed
	if err := json.Unmarshal(raw, &t); err != nil {
		return nil, fmt.Errorf("%s: %w: %w", field, err, ErrFormat)
	}
	switch t.Type {
	case "Sequence":
		var seq struct {
			PreTokenizers []json.RawMessage `json:"pretokenizers"`
		}
		if err := json.Unmarshal(raw, &seq); err != nil {
			return nil, fmt.Errorf("%s: %w: %w", field, err, ErrFormat)
		}
		var out preTokenizer
		for i, sub := range seq.PreTokenizers {
			p, err := parsePreTokenizer(sub, fmt.Sprintf("%s.pretokenizers[%d]", field, i))
			if err != nil {
				return nil, err
			}
			out = append(out, p...)
		}
		return out, nil
	case "Split":
		var sp struct {
			Pattern struct {
				Regex  *string `json:"Regex"`
				String *string `json:"String"`
			} `json:"pattern"`
			Behavior string `json:"behavior"`
			Invert   bool   `json:"invert"`
		}
		if err := json.Unmarshal(raw, &sp); err != nil {
			return nil, fmt.Errorf("%s: %w: %w", field, err, ErrFormat)
		}
		if sp.Behavior != "Isolated" || sp.Invert {
			return nil, fmt.Errorf("%s: behavior %q invert %v, want Isolated without invert: %w",
				field, sp.Behavior, sp.Invert, ErrUnsupported)
		}
		var pattern string
		switch {
		case sp.Pattern.Regex != nil:
			pattern = *sp.Pattern.Regex
		case sp.Pattern.String != nil:
			pattern = regexp2.Escape(*sp.Pattern.String)
		default:
			return nil, fmt.Errorf("%s.pattern: neither Regex nor String: %w", field, ErrFormat)
		}
		re, err := compilePattern(pattern)
		if err != nil {
			return nil, fmt.Errorf("%s.pattern: %w: %w", field, err, ErrFormat)
		}
		return preTokenizer{{re: re}}, nil
	case "ByteLevel":
		var bl struct {
			AddPrefixSpace bool  `json:"add_prefix_space"`
			UseRegex       *bool `json:"use_regex"`
		}
		if err := json.Unmarshal(raw, &bl); err != nil {
			return nil, fmt.Errorf("%s: %w: %w", field, err, ErrFormat)
		}
		step := preStep{prefixSpace: bl.AddPrefixSpace}
		if bl.UseRegex == nil || *bl.UseRegex { // HF's default is true
			re, err := compilePattern(gpt2Pattern)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", field, err)
			}
			step.re = re
		}
		return preTokenizer{step}, nil
	default:
		return nil, fmt.Errorf("%s.type: %q, want Sequence, Split or ByteLevel: %w", field, t.Type, ErrUnsupported)
	}
}

// each calls fn with every non-empty pre-token of s, in order. s must be valid UTF-8.
func (p preTokenizer) each(s string, step int, fn func(string)) {
	if s == "" {
		return
	}
	if step == len(p) {
		fn(s)
		return
	}
	st := p[step]
	if st.prefixSpace && s[0] != ' ' {
		s = " " + s
	}
	if st.re == nil {
		p.each(s, step+1, fn)
		return
	}
	splitIsolated(st.re, s, func(piece string) { p.each(piece, step+1, fn) })
}

// splitIsolated calls fn with each match of re in s and each gap between matches.
// regexp2 reports rune offsets; they are walked forward into byte offsets.
func splitIsolated(re *regexp2.Regexp, s string, fn func(string)) {
	runePos, bytePos := 0, 0
	advance := func(to int) int {
		for runePos < to {
			_, n := utf8.DecodeRuneInString(s[bytePos:])
			bytePos += n
			runePos++
		}
		return bytePos
	}
	last := 0
	m, err := re.FindStringMatch(s)
	for ; m != nil && err == nil; m, err = re.FindNextMatch(m) {
		start := advance(m.Index)
		end := advance(m.Index + m.Length)
		if start > last {
			fn(s[last:start])
		}
		if end > start {
			fn(s[start:end])
		}
		last = end
	}
	if err != nil {
		// regexp2 errors only when a match timeout expires, and compilePattern sets none.
		panic(fmt.Sprintf("bpe: regexp2 failed without a match timeout: %v", err))
	}
	if last < len(s) {
		fn(s[last:])
	}
}

// addedToken is one entry of tokenizer.json's added_tokens.
type addedToken struct {
	ID         int32  `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized bool   `json:"normalized"`
	Special    bool   `json:"special"`
}

// matcher finds added tokens in text, leftmost first and longest at a position, as HF's
// AddedVocabulary does with a leftmost-longest Aho-Corasick automaton. Added tokens are
// few (26 in Qwen3), so candidates are bucketed by first byte and tried longest first.
type matcher struct {
	tokens  []addedToken
	byFirst [256][]int // indices into tokens, longest content first
}

func newMatcher(tokens []addedToken, keep func(addedToken) bool) matcher {
	var m matcher
	for _, t := range tokens {
		if keep(t) {
			m.tokens = append(m.tokens, t)
		}
	}
	for i, t := range m.tokens {
		m.byFirst[t.Content[0]] = append(m.byFirst[t.Content[0]], i)
	}
	for b := range m.byFirst {
		c := m.byFirst[b]
		// Insertion sort by length, longest first; stable so equal contents keep file order.
		for i := 1; i < len(c); i++ {
			for j := i; j > 0 && len(m.tokens[c[j]].Content) > len(m.tokens[c[j-1]].Content); j-- {
				c[j], c[j-1] = c[j-1], c[j]
			}
		}
	}
	return m
}

// find returns the leftmost-longest added token in s at or after from.
func (m *matcher) find(s string, from int) (start, end, tok int) {
	for i := from; i < len(s); i++ {
		for _, k := range m.byFirst[s[i]] {
			if strings.HasPrefix(s[i:], m.tokens[k].Content) {
				return i, i + len(m.tokens[k].Content), k
			}
		}
	}
	return -1, -1, -1
}

func isWordRune(r rune) bool { return r == '_' || unicode.IsLetter(r) || unicode.IsNumber(r) }

// split calls fn with the text between added tokens (tok < 0) and with each added token's
// id, in order, applying single_word, lstrip and rstrip as HF does.
func (m *matcher) split(s string, fn func(text string, id int32)) {
	if len(m.tokens) == 0 {
		fn(s, -1)
		return
	}
	done := 0 // s[:done] has been passed to fn
	for from := 0; from < len(s); {
		start, end, k := m.find(s, from)
		if k < 0 {
			break
		}
		t := m.tokens[k]
		from = end
		if t.SingleWord {
			before, _ := utf8.DecodeLastRuneInString(s[:start])
			after, _ := utf8.DecodeRuneInString(s[end:])
			if start > 0 && isWordRune(before) || end < len(s) && isWordRune(after) {
				continue
			}
		}
		if t.LStrip {
			for start > done {
				r, n := utf8.DecodeLastRuneInString(s[:start])
				if !unicode.IsSpace(r) {
					break
				}
				start -= n
			}
		}
		if t.RStrip {
			for end < len(s) {
				r, n := utf8.DecodeRuneInString(s[end:])
				if !unicode.IsSpace(r) {
					break
				}
				end += n
			}
			from = end
		}
		if start > done {
			fn(s[done:start], -1)
		}
		fn(s[start:end], t.ID)
		done = end
	}
	if done < len(s) {
		fn(s[done:], -1)
	}
}

// pipeline turns text into pre-tokens the way HF's TokenizerImpl does before the model:
// added tokens not marked normalized are split out of the raw text, the rest is
// normalised, normalized added tokens are split out of that, and the pre-tokenizer cuts
// what remains. Invalid UTF-8 never reaches the normaliser or the regex (which would turn
// it into U+FFFD): each maximal invalid run is one pre-token of its raw bytes, so
// Decode(Encode(s)) gives those bytes back.
type pipeline struct {
	norm  normalizer
	pre   preTokenizer
	raw   matcher // added tokens with normalized=false
	normd matcher // added tokens with normalized=true
}

// each calls fn for every pre-token (id < 0, piece holds its raw bytes) and every added
// token (id >= 0), in order.
func (p *pipeline) each(s string, fn func(piece string, id int32)) {
	p.raw.split(s, func(text string, id int32) {
		if id >= 0 {
			fn(text, id)
			return
		}
		for len(text) > 0 {
			n := validPrefix(text)
			if n == 0 {
				n = invalidPrefix(text)
				fn(text[:n], -1)
			} else {
				p.normd.split(p.norm.apply(text[:n]), func(seg string, id int32) {
					if id >= 0 {
						fn(seg, id)
						return
					}
					p.pre.each(seg, 0, func(piece string) { fn(piece, -1) })
				})
			}
			text = text[n:]
		}
	})
}

// validPrefix is the length of the longest valid UTF-8 prefix of s.
func validPrefix(s string) int {
	for i := 0; i < len(s); {
		if s[i] < utf8.RuneSelf {
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			return i
		}
		i += n
	}
	return len(s)
}

// invalidPrefix is the length of the run of invalid UTF-8 bytes that starts s.
func invalidPrefix(s string) int {
	i := 0
	for i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r != utf8.RuneError || n != 1 {
			break
		}
		i++
	}
	return i
}
