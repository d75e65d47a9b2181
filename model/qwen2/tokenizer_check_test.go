package qwen2

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/mempo/mempo/model/bpe"
)

// vocab is a tokenizer laid out as Qwen2's: regular tokens, then the special ones.
type vocab struct {
	tokens  []string
	special map[string]bool
}

func (v vocab) VocabSize() int { return len(v.tokens) }

func (v vocab) TokenString(id int32) (string, bool) {
	if id < 0 || int(id) >= len(v.tokens) {
		return "", false
	}
	return v.tokens[id], true
}

func (v vocab) Special(s string) (int32, bool) {
	if !v.special[s] {
		return 0, false
	}
	i := slices.Index(v.tokens, s)
	return int32(i), i >= 0
}

func qwenLikeVocab(regular int) vocab {
	v := vocab{special: map[string]bool{}}
	for i := range regular {
		v.tokens = append(v.tokens, fmt.Sprintf("t%d", i))
	}
	for _, s := range []string{bpe.EndOfText, bpe.ImStart, bpe.ImEnd} {
		v.tokens = append(v.tokens, s)
		v.special[s] = true
	}
	return v
}

// TestCheckTokenizer: a tokenizer of the model's layout passes; one with the same size
// but shuffled ids, one 200 tokens shorter, or one without a special token the prompt
// format needs is refused, though CheckVocab passes each of them.
func TestCheckTokenizer(t *testing.T) {
	good := qwenLikeVocab(1000)
	c := testConfig()
	c.VocabSize = 1024
	eos, bos := slices.Index(good.tokens, bpe.ImEnd), slices.Index(good.tokens, bpe.EndOfText)
	c.EOSTokenID, c.BOSTokenID = &eos, &bos

	shuffled := vocab{tokens: slices.Clone(good.tokens), special: good.special}
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(shuffled.tokens), func(i, j int) {
		shuffled.tokens[i], shuffled.tokens[j] = shuffled.tokens[j], shuffled.tokens[i]
	})
	short := vocab{tokens: good.tokens[:len(good.tokens)-200], special: good.special}
	noChat := vocab{tokens: good.tokens, special: map[string]bool{bpe.EndOfText: true, bpe.ImEnd: true}}

	trained, err := bpe.Train(slices.Values([]string{"the cat sat on the mat"}), bpe.TrainConfig{VocabSize: 300})
	if err != nil {
		t.Fatal(err)
	}
	tc := testConfig()
	tc.VocabSize = 320
	te, _ := trained.Special(bpe.ImEnd)
	tb, _ := trained.Special(bpe.EndOfText)
	tei, tbi := int(te), int(tb)
	tc.EOSTokenID, tc.BOSTokenID = &tei, &tbi

	tests := []struct {
		name string
		cfg  Config
		tok  Vocab
		want string // "" for no error
	}{
		{"model's tokenizer", c, good, ""},
		{"trained tokenizer", tc, trained, ""},
		{"shuffled ids", c, shuffled, "not a special token"},
		{"200 tokens fewer", c, short, "no such token"},
		{"no ChatML start", c, noChat, bpe.ImStart},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.cfg.CheckVocab(tt.tok.VocabSize()); err != nil {
				t.Fatalf("CheckVocab(%d) = %v, want nil: the case must pass the size check", tt.tok.VocabSize(), err)
			}
			err := tt.cfg.CheckTokenizer(tt.tok, bpe.ImStart, bpe.ImEnd)
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("CheckTokenizer = %v, want nil", err)
			case tt.want != "" && (!errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("CheckTokenizer = %v, want ErrConfig mentioning %q", err, tt.want)
			}
		})
	}
}
