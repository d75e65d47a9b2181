package bpe

import (
	"slices"
	"sync"
	"testing"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

var trainedOnce = sync.OnceValues(func() (*Tokenizer, error) {
	return Train(slices.Values(corpusLines(11, 256<<10)), TrainConfig{VocabSize: 1024})
})

// trained is a small tokenizer trained on the synthetic corpus, shared by tests.
func trained(t testing.TB) *Tokenizer {
	t.Helper()
	tok, err := trainedOnce()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// nfcStable reports whether every valid UTF-8 run of s is in NFC, the inputs for which
// the tokenizers' NFC normaliser changes nothing.
func nfcStable(s string) bool {
	for len(s) > 0 {
		n := validPrefix(s)
		if n == 0 {
			n = invalidPrefix(s)
		} else if !norm.NFC.IsNormalString(s[:n]) {
			return false
		}
		s = s[n:]
	}
	return true
}

// FuzzRoundTrip checks Decode(Encode(s)) == s on the Qwen3 fixture and on a trained
// tokenizer, for any bytes, valid UTF-8 or not. Both normalise with NFC, so for input
// not in NFC the promise is the normalised text: the output must then be a fixed point.
func FuzzRoundTrip(f *testing.F) {
	for _, g := range loadGoldens(f) {
		f.Add(g.Text)
	}
	for _, s := range []string{"", "\xff", "a\x80b", "中\xe4\xbd", "<|im_end|>\xff", "<mem>\xc3</mem>",
		"\xed\xa0\x80", "e\u0301\xff", "  \n\x00\t", corpus(12, 2048)} {
		f.Add(s)
	}
	toks := map[string]*Tokenizer{"qwen3": qwen(f), "trained": trained(f)}
	f.Fuzz(func(t *testing.T, s string) {
		for name, tok := range toks {
			ids := tok.Encode(s)
			for _, id := range ids {
				if id < 0 || int(id) >= tok.VocabSize() {
					t.Fatalf("%s: Encode(%q) has id %d outside [0, %d)", name, s, id, tok.VocabSize())
				}
			}
			got := tok.Decode(ids)
			if nfcStable(s) {
				if got != s {
					t.Fatalf("%s: Decode(Encode(%q)) = %q, want the input", name, s, got)
				}
				continue
			}
			if again := tok.Decode(tok.Encode(got)); again != got {
				t.Fatalf("%s: normalised %q round-trips to %q", name, got, again)
			}
			if utf8.ValidString(s) && got != norm.NFC.String(s) && !hasAdded(tok, s) {
				t.Fatalf("%s: Decode(Encode(%q)) = %q, want its NFC form %q", name, s, got, norm.NFC.String(s))
			}
		}
	})
}

// hasAdded reports whether s contains an added token, which splits NFC into segments.
func hasAdded(tok *Tokenizer, s string) bool {
	_, _, k := tok.pipe.raw.find(s, 0)
	return k >= 0
}
