package train

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/mempo/mempo/format"
	"github.com/mempo/mempo/model/bpe"
	"github.com/mempo/mempo/model/qwen2"
)

// TestCopyTokenizerKeepsUsersFiles: a user's checkpoint whose tokenizer_config.json
// has its own chat template (and no special_tokens_map.json) keeps that file byte for
// byte through training; the missing map is generated.
func TestCopyTokenizerKeepsUsersFiles(t *testing.T) {
	tok, err := bpe.Train(slices.Values([]string{"who founded acme"}), bpe.TrainConfig{VocabSize: 300})
	if err != nil {
		t.Fatal(err)
	}
	eos := 2
	from, dir := t.TempDir(), t.TempDir()
	if err := tok.Save(filepath.Join(from, format.TokenizerFile)); err != nil {
		t.Fatal(err)
	}
	users := []byte(`{"chat_template": "{{ messages[0].content }}!", "eos_token": "<|im_end|>", "model_max_length": 32768}`)
	if err := os.WriteFile(filepath.Join(from, bpe.ConfigFile), users, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := copyTokenizer(dir, from, qwen2.Config{MaxPositions: 128, EOSTokenID: &eos}); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, bpe.ConfigFile)); !bytes.Equal(got, users) {
		t.Errorf("%s = %s, want the user's file %s", bpe.ConfigFile, got, users)
	}
	if _, err := os.Stat(filepath.Join(dir, bpe.SpecialTokensFile)); err != nil {
		t.Errorf("the missing %s was not generated: %v", bpe.SpecialTokensFile, err)
	}
}

func TestCopyTokenizer(t *testing.T) {
	tok, err := bpe.Train(slices.Values([]string{"who founded acme", "<mem>m</mem>"}), bpe.TrainConfig{VocabSize: 300})
	if err != nil {
		t.Fatal(err)
	}
	eos, bos := 2, 0 // <|im_end|>, <|endoftext|> in bpe.DefaultSpecial order
	mc := qwen2.Config{MaxPositions: 128, EOSTokenID: &eos, BOSTokenID: &bos}
	tests := []struct {
		name string
		save func(dir string) error
	}{
		{"tokenizer.json only", func(dir string) error { return tok.Save(filepath.Join(dir, format.TokenizerFile)) }},
		{"whole set", func(dir string) error { return tok.SaveHF(dir, bpe.DefaultHFConfig(128)) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			from, dir := t.TempDir(), t.TempDir()
			if err := tt.save(from); err != nil {
				t.Fatal(err)
			}
			if err := copyTokenizer(dir, from, mc); err != nil {
				t.Fatalf("copyTokenizer = %v", err)
			}
			// Copied or generated, the set is what init-model writes for this model.
			want := t.TempDir()
			if err := tok.SaveHF(want, bpe.DefaultHFConfig(128)); err != nil {
				t.Fatal(err)
			}
			for _, name := range append([]string{format.TokenizerFile}, bpe.CompanionFiles...) {
				got, err := os.ReadFile(filepath.Join(dir, name))
				if err != nil {
					t.Fatalf("copyTokenizer wrote no %s: %v", name, err)
				}
				w, _ := os.ReadFile(filepath.Join(want, name))
				if !bytes.Equal(got, w) {
					t.Errorf("%s = %s, want %s", name, got, w)
				}
			}
			var conf struct {
				EOS string `json:"eos_token"`
			}
			b, _ := os.ReadFile(filepath.Join(dir, bpe.ConfigFile))
			if err := json.Unmarshal(b, &conf); err != nil || conf.EOS != bpe.ImEnd {
				t.Errorf("%s eos_token = %q, %v; want %q, config.json's eos_token_id %d", bpe.ConfigFile, conf.EOS, err, bpe.ImEnd, eos)
			}
		})
	}

	t.Run("no tokenizer", func(t *testing.T) {
		dir := t.TempDir()
		if err := copyTokenizer(dir, t.TempDir(), mc); err != nil {
			t.Fatalf("copyTokenizer from a dir without tokenizer.json = %v, want nil", err)
		}
		if entries, _ := os.ReadDir(dir); len(entries) != 0 {
			t.Errorf("copyTokenizer from a dir without tokenizer.json wrote %v", entries)
		}
	})
	t.Run("eos not special", func(t *testing.T) {
		from := t.TempDir()
		if err := tok.Save(filepath.Join(from, format.TokenizerFile)); err != nil {
			t.Fatal(err)
		}
		bad := 200 // a merged token
		if err := copyTokenizer(t.TempDir(), from, qwen2.Config{MaxPositions: 128, EOSTokenID: &bad}); err == nil {
			t.Errorf("copyTokenizer with eos_token_id %d (not special) = nil, want an error", bad)
		}
	})
}
