package bpe

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// tiny builds a tokenizer over the 256 byte tokens (id = byte value) plus the given
// merges and added tokens, with Qwen2's pipeline.
func tiny(t *testing.T, merges [][2]string, added ...addedToken) *Tokenizer {
	t.Helper()
	f := trainFile(nil)
	f.AddedTokens = added
	f.Model.Vocab = make(map[string]int32)
	for b := range 256 {
		f.Model.Vocab[string(byteRune[b])] = int32(b)
	}
	for _, m := range merges {
		if _, ok := f.Model.Vocab[m[0]+m[1]]; !ok {
			f.Model.Vocab[m[0]+m[1]] = int32(len(f.Model.Vocab))
		}
	}
	tok, err := build(&f, merges)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// pieces returns the token strings of ids, for readable comparisons.
func pieces(tok *Tokenizer, ids []int32) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i], _ = tok.TokenString(id)
	}
	return out
}

func TestMergeOrder(t *testing.T) {
	// "ab" outranks "bc"; "aa" shows that equal ranks merge leftmost first; "abc" is
	// reachable only through "ab" + "c".
	tok := tiny(t, [][2]string{{"a", "b"}, {"b", "c"}, {"a", "a"}, {"ab", "c"}, {"Ġ", "a"}})
	tests := []struct {
		in   string
		want []string
	}{
		{"abc", []string{"abc"}},
		{"bc", []string{"bc"}},
		{"aaa", []string{"aa", "a"}},
		{"aaaa", []string{"aa", "aa"}},
		{"abab", []string{"ab", "ab"}},
		{"xbcab", []string{"x", "bc", "ab"}},
		{" a", []string{"Ġa"}},
		{"a b", []string{"a", "Ġ", "b"}},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got := pieces(tok, tok.Encode(tt.in))
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Encode(%q) mismatch (-want +got):\n%s", tt.in, diff)
			}
		})
	}
}

func TestRoundTripQwen(t *testing.T) {
	tok := qwen(t)
	tests := []struct {
		name, in, want string
	}{
		{"ascii", "Hello, world!", "Hello, world!"},
		{"chinese", "你好，世界", "你好，世界"},
		{"emoji zwj", "👨‍👩‍👧‍👦 🏳️‍🌈", "👨‍👩‍👧‍👦 🏳️‍🌈"},
		{"special", "<|im_start|>user\nhi<|im_end|>\n", "<|im_start|>user\nhi<|im_end|>\n"},
		{"invalid byte", "a\xffb", "a\xffb"},
		{"invalid run", "\xfe\xff\x80\x80", "\xfe\xff\x80\x80"},
		{"truncated rune", "中\xe4\xbd", "中\xe4\xbd"},
		{"invalid before mark", "\xffe\u0301", "\xff\u00e9"},
		{"nfc", "cafe\u0301", "caf\u00e9"},
		{"angstrom sign", "\u212b", "\u00c5"},
		{"nul", "a\x00b", "a\x00b"},
		{"empty", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ids := tok.Encode(tt.in)
			if got := tok.Decode(ids); got != tt.want {
				t.Errorf("Decode(Encode(%q)) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

// TestDecodePartialCharacter checks that Decode joins bytes before UTF-8 decoding: a
// character spread over several tokens decodes whole only from the full sequence.
func TestDecodePartialCharacter(t *testing.T) {
	tok := qwen(t)
	ids := tok.Encode("龘") // rare: not one token
	if len(ids) < 2 {
		t.Fatalf("Encode(%q) = %v, want several byte tokens", "龘", ids)
	}
	var parts []string
	for _, id := range ids {
		parts = append(parts, tok.Decode([]int32{id}))
	}
	if got := strings.Join(parts, ""); got != "龘" {
		t.Errorf("joined single-token decodes = %q, want %q", got, "龘")
	}
	if got := tok.Decode(ids[:1]); got == "龘" || !strings.HasPrefix("龘", got) {
		t.Errorf("Decode(%v) = %q, want a strict byte prefix of %q", ids[:1], got, "龘")
	}
}

func TestVocabularyQwen(t *testing.T) {
	tok := qwen(t)
	if got, want := tok.VocabSize(), 151669; got != want {
		t.Errorf("VocabSize() = %d, want %d", got, want)
	}
	specials := []struct {
		name string
		id   int32
		ok   bool
	}{
		{"<|endoftext|>", 151643, true},
		{"<|im_start|>", 151644, true},
		{"<|im_end|>", 151645, true},
		{"<think>", 0, false}, // an added token, but not special in Qwen3
		{"Hello", 0, false},
	}
	for _, s := range specials {
		if id, ok := tok.Special(s.name); id != s.id || ok != s.ok {
			t.Errorf("Special(%q) = %d, %v, want %d, %v", s.name, id, ok, s.id, s.ok)
		}
	}
	ids := []struct {
		token string
		id    int32
	}{
		{"Hello", 9707}, {"Ġworld", 1879}, {"<think>", 151667}, {"<|im_end|>", 151645}, {"!", 0},
	}
	for _, c := range ids {
		if id, ok := tok.ID(c.token); id != c.id || !ok {
			t.Errorf("ID(%q) = %d, %v, want %d, true", c.token, id, ok, c.id)
		}
		if s, ok := tok.TokenString(c.id); s != c.token || !ok {
			t.Errorf("TokenString(%d) = %q, %v, want %q, true", c.id, s, ok, c.token)
		}
	}
	for _, id := range []int32{-1, 151669, 1 << 30} {
		if s, ok := tok.TokenString(id); ok {
			t.Errorf("TokenString(%d) = %q, true, want false", id, s)
		}
	}
	if _, ok := tok.ID("no such token"); ok {
		t.Errorf("ID(%q) found, want not found", "no such token")
	}
	if got := tok.Decode([]int32{9707, -5, 1 << 30, 1879}); got != "Hello world" {
		t.Errorf("Decode with unknown ids = %q, want %q (unknown ids skipped)", got, "Hello world")
	}
	if got := tok.SpecialTokens(); len(got) != 14 || got[0] != "<|endoftext|>" || got[2] != "<|im_end|>" {
		t.Errorf("SpecialTokens() = %q, want the 14 special tokens from <|endoftext|>", got)
	}
}

func TestAddedTokenOptions(t *testing.T) {
	tests := []struct {
		name  string
		added addedToken
		in    string
		want  []string
	}{
		{"plain", addedToken{ID: 300, Content: "<x>"}, "a <x> b", []string{"a", "Ġ", "<x>", "Ġ", "b"}},
		{"lstrip", addedToken{ID: 300, Content: "<x>", LStrip: true}, "a  <x> b", []string{"a", "<x>", "Ġ", "b"}},
		{"rstrip", addedToken{ID: 300, Content: "<x>", RStrip: true}, "a <x>  b", []string{"a", "Ġ", "<x>", "b"}},
		{"single word alone", addedToken{ID: 300, Content: "x", SingleWord: true}, "a x b", []string{"a", "Ġ", "x", "Ġ", "b"}},
		{"single word inside", addedToken{ID: 300, Content: "x", SingleWord: true}, "axb", []string{"a", "x", "b"}},
		{"longest wins", addedToken{ID: 300, Content: "<x>"}, "<x>>", []string{"<x>", ">"}},
		{"normalized after nfc", addedToken{ID: 300, Content: "\u00e9", Normalized: true}, "e\u0301!", []string{"\u00e9", "!"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tok := tiny(t, nil, tt.added)
			ids := tok.Encode(tt.in)
			if diff := cmp.Diff(tt.want, pieces(tok, ids)); diff != "" {
				t.Errorf("Encode(%q) mismatch (-want +got):\n%s", tt.in, diff)
			}
		})
	}
	// "single word inside" must not have matched the added token: its "x" is the byte token.
	tok := tiny(t, nil, addedToken{ID: 300, Content: "x", SingleWord: true})
	if got := tok.Encode("axb"); slices.Contains(got, 300) {
		t.Errorf("Encode(%q) = %v, want no added token 300 inside a word", "axb", got)
	}
}

func TestIgnoreMerges(t *testing.T) {
	// "abc" is in the vocabulary but no merge reaches it; only ignore_merges uses it whole.
	tok := tiny(t, [][2]string{{"a", "b"}})
	tok.vocab["abc"] = 300
	for _, tt := range []struct {
		ignore bool
		want   []string
	}{{false, []string{"ab", "c"}}, {true, []string{"abc"}}} {
		tok.ignoreMerges = tt.ignore
		tok.cache = cache{}
		got := tok.Encode("abc")
		want := make([]int32, len(tt.want))
		for i, s := range tt.want {
			want[i] = tok.vocab[s]
		}
		if !slices.Equal(got, want) {
			t.Errorf("ignore_merges=%v: Encode(%q) = %v, want %v (%q)", tt.ignore, "abc", got, want, tt.want)
		}
	}
}

// TestPathologicalInputs runs long runs that make backtracking regexes and quadratic
// merges slow through Encode; it checks the round trip, and a blow-up would show as a
// test timeout.
func TestPathologicalInputs(t *testing.T) {
	tok := qwen(t)
	const n = 1 << 18 // linear: 4x the size took 4x the time when measured up to 1 MB
	tests := map[string]string{
		"spaces":             strings.Repeat(" ", n),
		"spaces then letter": strings.Repeat(" ", n) + "x",
		"newlines":           strings.Repeat("\n", n),
		"space newline":      strings.Repeat(" \n", n/2),
		"tabs and spaces":    strings.Repeat("\t ", n/2) + "y",
		"one long word":      strings.Repeat("a", n),
		"digits":             strings.Repeat("7", n/4),
		"punctuation":        strings.Repeat("!?", n/2),
		"cjk":                strings.Repeat("龘", n/3),
		"invalid bytes":      strings.Repeat("\xff", n),
	}
	for name, in := range tests {
		t.Run(name, func(t *testing.T) {
			if got := tok.Decode(tok.Encode(in)); got != in {
				t.Errorf("Decode(Encode(%d bytes of %s)) differs from the input", len(in), name)
			}
		})
	}
}

func TestConcurrentEncode(t *testing.T) {
	tok := qwen(t)
	texts := corpusLines(7, 64<<10)
	want := make([][]int32, len(texts))
	for i, s := range texts {
		want[i] = tok.Encode(s)
	}
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < len(texts); i += 3 {
				if got := tok.Encode(texts[i]); !slices.Equal(got, want[i]) {
					errs <- fmt.Sprintf("goroutine %d: Encode(%q) = %v, want %v", g, texts[i], got, want[i])
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

func TestChatML(t *testing.T) {
	msgs := []Message{{Role: "system", Content: "Be brief."}, {Role: "user", Content: "Hi"}}
	tests := []struct {
		name     string
		generate bool
		want     string
	}{
		{"closed", false, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"},
		{"generate", true, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ChatML(msgs, tt.generate); got != tt.want {
				t.Errorf("ChatML(%v, %v) = %q, want %q", msgs, tt.generate, got, tt.want)
			}
		})
	}
	tok := qwen(t)
	got := tok.Encode(ChatML([]Message{{Role: "user", Content: "Hi"}}, true))
	want := []int32{151644, 872, 198, 13048, 151645, 198, 151644, 77091, 198}
	if !slices.Equal(got, want) {
		t.Errorf("Encode(ChatML(user Hi, generate)) = %v, want %v", got, want)
	}
}
