package bpe

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var hfDir = flag.String("hfdir", "", "TestTrainHFExport writes tokenizer.json and cases.json here for testdata/check_hf.py")

// naiveMerges is the textbook trainer: recount every pair before each merge. Train must
// learn exactly its merges.
func naiveMerges(t *testing.T, texts []string, cfg TrainConfig) [][2]string {
	t.Helper()
	f := trainFile(cfg.Special)
	pipe, err := filePipeline(&f)
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]int64{}
	for _, s := range texts {
		pipe.each(s, func(piece string, id int32) {
			if id < 0 {
				counts[piece]++
			}
		})
	}
	tokens := slices.Clone(cfg.Special)
	ids := map[string]int32{}
	for i, s := range tokens {
		ids[s] = int32(i)
	}
	alphabet := slices.Clone(byteRune[:])
	slices.Sort(alphabet)
	var byteID [256]int32
	for _, r := range alphabet {
		byteID[runeByte[r]] = int32(len(tokens))
		ids[string(r)] = int32(len(tokens))
		tokens = append(tokens, string(r))
	}
	var words [][]int32
	var freq []int64
	for w, c := range counts {
		syms := make([]int32, len(w))
		for i := range len(w) {
			syms[i] = byteID[w[i]]
		}
		words, freq = append(words, syms), append(freq, c)
	}
	var merges [][2]string
	for len(tokens) < cfg.VocabSize {
		pairs := map[[2]int32]int64{}
		for i, w := range words {
			for j := 0; j+1 < len(w); j++ {
				pairs[[2]int32{w[j], w[j+1]}] += freq[i]
			}
		}
		var best [2]int32
		var bestN int64
		for p, n := range pairs {
			if n > bestN || n == bestN && (p[0] < best[0] || p[0] == best[0] && p[1] < best[1]) {
				best, bestN = p, n
			}
		}
		if bestN < max(int64(cfg.MinFrequency), 1) {
			break
		}
		merged := tokens[best[0]] + tokens[best[1]]
		id, ok := ids[merged]
		if !ok {
			id = int32(len(tokens))
			ids[merged] = id
			tokens = append(tokens, merged)
		}
		merges = append(merges, [2]string{tokens[best[0]], tokens[best[1]]})
		for i, w := range words {
			var out []int32
			for j := 0; j < len(w); j++ {
				if j+1 < len(w) && w[j] == best[0] && w[j+1] == best[1] {
					out = append(out, id)
					j++
				} else {
					out = append(out, w[j])
				}
			}
			words[i] = out
		}
	}
	return merges
}

func merges(tok *Tokenizer) [][2]string {
	out := make([][2]string, len(tok.pairs))
	for i, p := range tok.pairs {
		out[i] = [2]string{tok.tokens[p[0]], tok.tokens[p[1]]}
	}
	return out
}

func TestTrainMatchesNaive(t *testing.T) {
	tests := []struct {
		name  string
		texts []string
		cfg   TrainConfig
	}{
		{"corpus", corpusLines(3, 24<<10), TrainConfig{VocabSize: 700, Special: DefaultSpecial()}},
		{"min frequency", corpusLines(4, 8<<10), TrainConfig{VocabSize: 2000, Special: DefaultSpecial(), MinFrequency: 5}},
		{"overlapping pairs", []string{"aaaa aaa aaaaaaa", "abababab ababa", "zzzzzzzzzz"}, TrainConfig{VocabSize: 280, Special: []string{"<s>"}}},
		{"ties", []string{"ab cd ef gh", "ba dc fe hg"}, TrainConfig{VocabSize: 270, Special: []string{}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tok, err := Train(slices.Values(tt.texts), tt.cfg)
			if err != nil {
				t.Fatal(err)
			}
			want := naiveMerges(t, tt.texts, tt.cfg)
			if len(want) == 0 {
				t.Fatal("the naive trainer learned no merges; the case tests nothing")
			}
			if diff := cmp.Diff(want, merges(tok)); diff != "" {
				t.Errorf("Train merges differ from recounting every step (-want +got):\n%s", diff)
			}
		})
	}
}

func TestTrainVocabulary(t *testing.T) {
	lines := corpusLines(5, 256<<10)
	tok, err := Train(slices.Values(lines), TrainConfig{VocabSize: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if got := tok.VocabSize(); got != 1000 {
		t.Errorf("VocabSize() = %d, want 1000", got)
	}
	// Every added token keeps its id; only the control tokens <|…|> are special.
	for i, s := range DefaultSpecial() {
		control := strings.HasPrefix(s, "<|")
		if id, ok := tok.ID(s); !ok || id != int32(i) {
			t.Errorf("ID(%q) = %d, %v, want %d, true", s, id, ok, i)
		}
		if _, ok := tok.Special(s); ok != control {
			t.Errorf("Special(%q) ok = %v, want %v", s, ok, control)
		}
	}
	got := tok.Encode("<mem>facts</mem>\n<|im_end|>")
	if got[0] != 3 || !slices.Contains(got, 4) || got[len(got)-1] != 2 {
		t.Errorf("Encode(<mem>facts</mem>\\n<|im_end|>) = %v, want <mem>=3 first, </mem>=4, <|im_end|>=2 last", got)
	}
	// Learned merges compress the text they were trained on: at least 3 bytes a token.
	text := strings.Join(lines, "")
	if n := len(tok.Encode(text)); n*3 > len(text) {
		t.Errorf("Encode(training text) = %d tokens for %d bytes, want at most a third as many tokens", n, len(text))
	}
	for _, s := range lines[:200] {
		if got := tok.Decode(tok.Encode(s)); got != s {
			t.Fatalf("Decode(Encode(%q)) = %q", s, got)
		}
	}
}

func TestTrainDeterministic(t *testing.T) {
	lines := corpusLines(6, 128<<10)
	var saved [][]byte
	for range 2 {
		tok, err := Train(slices.Values(lines), TrainConfig{VocabSize: 800})
		if err != nil {
			t.Fatal(err)
		}
		data, err := tok.marshal()
		if err != nil {
			t.Fatal(err)
		}
		saved = append(saved, data)
	}
	if !bytes.Equal(saved[0], saved[1]) {
		t.Error("two Train runs on the same texts and config wrote different tokenizer.json")
	}
}

func TestTrainSmallCorpusStopsEarly(t *testing.T) {
	tok, err := Train(slices.Values([]string{"abc abc"}), TrainConfig{VocabSize: 5000, MinFrequency: 2})
	if err != nil {
		t.Fatal(err)
	}
	// Pairs "ab", "bc"/"abc", "Ġa"... each occur twice; nothing else does.
	if got := tok.VocabSize(); got >= 5000 || got <= 13+256 {
		t.Errorf("VocabSize() = %d, want a few merges past the 269 base tokens and far below 5000", got)
	}
	if got := tok.Encode("abc"); len(got) != 1 {
		t.Errorf("Encode(%q) = %v, want one token", "abc", got)
	}
}

func TestTrainConfigErrors(t *testing.T) {
	tests := []struct {
		name  string
		cfg   TrainConfig
		field string
	}{
		{"vocab too small", TrainConfig{VocabSize: 200}, "vocab_size 200"},
		{"empty special", TrainConfig{VocabSize: 1000, Special: []string{"<a>", ""}}, "special[1]"},
		{"duplicate special", TrainConfig{VocabSize: 1000, Special: []string{"<a>", "<b>", "<a>"}}, "special[2]"},
		{"negative min frequency", TrainConfig{VocabSize: 1000, MinFrequency: -1}, "min_frequency"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Train(slices.Values([]string{"x"}), tt.cfg)
			if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tt.field) {
				t.Errorf("Train(%+v) = %v, want ErrConfig naming %q", tt.cfg, err, tt.field)
			}
		})
	}
}

// TestTrainHFExport saves a trained tokenizer, loads it back, and writes cases.json (texts
// with this package's ids) beside it. With -hfdir DIR the files stay in DIR for
//
//	python model/bpe/testdata/check_hf.py DIR/tokenizer.json DIR/cases.json
//
// which checks that HF tokenizers loads the file and encodes and decodes identically.
func TestTrainHFExport(t *testing.T) {
	dir := *hfDir
	if dir == "" {
		dir = t.TempDir()
	}
	tok, err := Train(slices.Values(corpusLines(8, 512<<10)), TrainConfig{VocabSize: 2048})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "tokenizer.json")
	if err := tok.Save(path); err != nil {
		t.Fatal(err)
	}
	loaded, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	type hfCase struct {
		Text    string  `json:"text"`
		IDs     []int32 `json:"ids"`
		Decoded string  `json:"decoded"`
	}
	var cases []hfCase
	texts := append(corpusLines(9, 16<<10), ChatML([]Message{{Role: "user", Content: "Q?"}}, true),
		"<think>x</think>\n<search>q</search>", "<information>doc</information><mem>m</mem><answer>a</answer>",
		"中文 and emoji 😀 and   spaces\n\n\ttabs", "e\u0301 NFC", "1234567", "I'LL don't")
	for _, s := range texts {
		ids := tok.Encode(s)
		if got := loaded.Encode(s); !slices.Equal(got, ids) {
			t.Fatalf("after Save/Load: Encode(%q) = %v, want %v", s, got, ids)
		}
		cases = append(cases, hfCase{Text: s, IDs: ids, Decoded: tok.Decode(ids)})
	}
	data, err := json.Marshal(map[string]any{"cases": cases})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cases.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
}
