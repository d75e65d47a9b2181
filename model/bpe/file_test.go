package bpe

import (
	"bytes"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// smallJSON is a valid tokenizer.json: the byte tokens, a few merges and the default
// special tokens, as a generic JSON value ready to be broken by a test.
func smallJSON(t *testing.T) map[string]any {
	t.Helper()
	tok, err := Train(slices.Values([]string{"aaa abab abc", "hello hello"}), TrainConfig{VocabSize: 280})
	if err != nil {
		t.Fatal(err)
	}
	data, err := tok.marshal()
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

func TestLoadErrors(t *testing.T) {
	tests := []struct {
		name  string
		edit  func(v map[string]any)
		field string // the error names it
		class error
	}{
		{"model type", func(v map[string]any) { mdl(v)["type"] = "WordPiece" }, "model.type", ErrUnsupported},
		{"dropout", func(v map[string]any) { mdl(v)["dropout"] = 0.1 }, "model.dropout", ErrUnsupported},
		{"byte fallback", func(v map[string]any) { mdl(v)["byte_fallback"] = true }, "model.byte_fallback", ErrUnsupported},
		{"suffix", func(v map[string]any) { mdl(v)["end_of_word_suffix"] = "</w>" }, "model.end_of_word_suffix", ErrUnsupported},
		{"merge of unknown token", func(v map[string]any) {
			mdl(v)["merges"] = append(mdl(v)["merges"].([]any), "zz qq")
		}, "model.merges[", ErrFormat},
		{"merge line shape", func(v map[string]any) { mdl(v)["merges"] = []any{"a b c"} }, "model.merges[0]", ErrFormat},
		{"merges type", func(v map[string]any) { mdl(v)["merges"] = 7 }, "model.merges", ErrFormat},
		{"missing byte token", func(v map[string]any) { delete(mdl(v)["vocab"].(map[string]any), "Ġ") }, "model.vocab", ErrFormat},
		{"duplicate id", func(v map[string]any) { mdl(v)["vocab"].(map[string]any)["zz"] = 20.0 }, "model.vocab", ErrFormat},
		{"negative id", func(v map[string]any) { mdl(v)["vocab"].(map[string]any)["zz"] = -3.0 }, "model.vocab", ErrFormat},
		{"added id clash", func(v map[string]any) {
			v["added_tokens"].([]any)[0].(map[string]any)["id"] = 100.0
		}, "added_tokens[0]", ErrFormat},
		{"normalizer", func(v map[string]any) { v["normalizer"] = map[string]any{"type": "Lowercase"} }, "normalizer.type", ErrUnsupported},
		{"nested normalizer", func(v map[string]any) {
			v["normalizer"] = map[string]any{"type": "Sequence", "normalizers": []any{map[string]any{"type": "NFC"}, map[string]any{"type": "Strip"}}}
		}, "normalizer.normalizers[1].type", ErrUnsupported},
		{"split behavior", func(v map[string]any) {
			pre(v, 0)["behavior"] = "Removed"
		}, "pre_tokenizer.pretokenizers[0]", ErrUnsupported},
		{"bad regex", func(v map[string]any) {
			pre(v, 0)["pattern"] = map[string]any{"Regex": "(unclosed"}
		}, "pre_tokenizer.pretokenizers[0].pattern", ErrFormat},
		{"pre-tokenizer type", func(v map[string]any) {
			v["pre_tokenizer"] = map[string]any{"type": "Metaspace"}
		}, "pre_tokenizer.type", ErrUnsupported},
		{"decoder", func(v map[string]any) { v["decoder"] = map[string]any{"type": "Metaspace"} }, "decoder", ErrUnsupported},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := smallJSON(t)
			tt.edit(v)
			data, err := json.Marshal(v)
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(t.TempDir(), "tokenizer.json")
			if err := os.WriteFile(path, data, 0o644); err != nil {
				t.Fatal(err)
			}
			_, err = Load(path)
			if err == nil {
				t.Fatalf("Load(%s) succeeded, want an error naming %s", tt.name, tt.field)
			}
			if !errors.Is(err, tt.class) || !strings.Contains(err.Error(), tt.field) || !strings.Contains(err.Error(), path) {
				t.Errorf("Load = %v, want %v naming %q and the file", err, tt.class, tt.field)
			}
		})
	}
}

func mdl(v map[string]any) map[string]any { return v["model"].(map[string]any) }

func pre(v map[string]any, i int) map[string]any {
	return v["pre_tokenizer"].(map[string]any)["pretokenizers"].([]any)[i].(map[string]any)
}

func TestLoadMissingAndCorrupt(t *testing.T) {
	dir := t.TempDir()
	if _, err := Load(filepath.Join(dir, "nope.json")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Load(missing) = %v, want fs.ErrNotExist", err)
	}
	path := filepath.Join(dir, "trunc.json")
	if err := os.WriteFile(path, []byte(`{"model": {"vocab": {"a": 1`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(path); !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), path) {
		t.Errorf("Load(truncated) = %v, want ErrFormat naming %s", err, path)
	}
}

// TestMergeFormats loads the same merges written as "a b" lines and as pairs.
func TestMergeFormats(t *testing.T) {
	v := smallJSON(t)
	lines := mdl(v)["merges"].([]any)
	pairs := make([]any, len(lines))
	for i, l := range lines {
		a, b, _ := strings.Cut(l.(string), " ")
		pairs[i] = []any{a, b}
	}
	var encodings [][]int32
	for _, merges := range [][]any{lines, pairs} {
		mdl(v)["merges"] = merges
		data, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		tok, err := Parse(data, "test")
		if err != nil {
			t.Fatal(err)
		}
		encodings = append(encodings, tok.Encode("aaa abab abc hello"))
	}
	if diff := cmp.Diff(encodings[0], encodings[1]); diff != "" {
		t.Errorf("pair merges encode differently from line merges (-lines +pairs):\n%s", diff)
	}
}

// TestSaveRoundTripQwen saves the Qwen3 tokenizer, loads it back and checks the copy
// encodes every golden the same, keeps every file section, and saves to the same bytes.
func TestSaveRoundTripQwen(t *testing.T) {
	tok := qwen(t)
	dir := t.TempDir()
	first := filepath.Join(dir, "a.json")
	if err := tok.Save(first); err != nil {
		t.Fatal(err)
	}
	again, err := Load(first)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range loadGoldens(t) {
		if got := again.Encode(g.Text); !slices.Equal(got, g.IDs) {
			t.Fatalf("after Save/Load: Encode(%q) = %v, want %v", g.Text, got, g.IDs)
		}
	}
	second := filepath.Join(dir, "b.json")
	if err := again.Save(second); err != nil {
		t.Fatal(err)
	}
	a, _ := os.ReadFile(first)
	b, _ := os.ReadFile(second)
	if !bytes.Equal(a, b) {
		t.Errorf("Save(Load(Save(qwen))) differs from Save(qwen): %d vs %d bytes", len(b), len(a))
	}

	// Same JSON content as the original file, merges format aside.
	orig, err := os.ReadFile(qwenPath)
	if err != nil {
		t.Fatal(err)
	}
	var want, got map[string]any
	if err := json.Unmarshal(orig, &want); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(a, &got); err != nil {
		t.Fatal(err)
	}
	wantMerges, gotMerges := mdl(want)["merges"].([]any), mdl(got)["merges"].([]any)
	if len(wantMerges) != len(gotMerges) {
		t.Fatalf("saved %d merges, want %d", len(gotMerges), len(wantMerges))
	}
	for i, m := range wantMerges {
		p := m.([]any)
		if line := p[0].(string) + " " + p[1].(string); gotMerges[i] != line {
			t.Fatalf("saved merges[%d] = %q, want %q", i, gotMerges[i], line)
		}
	}
	delete(mdl(want), "merges")
	delete(mdl(got), "merges")
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("saved tokenizer.json differs from the fixture (-want +got):\n%s", diff)
	}
	if fi, err := os.Stat(first); err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("Save wrote %s with mode %v (%v), want -rw-r--r--", first, fi.Mode(), err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 2 {
		t.Errorf("Save left %d files in %s, want 2 (no temporary files)", len(entries), dir)
	}
}

func TestSaveErrorNamesPath(t *testing.T) {
	tok := tiny(t, nil)
	path := filepath.Join(t.TempDir(), "missing-dir", "tokenizer.json")
	if err := tok.Save(path); err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("Save into a missing directory = %v, want an error naming %s", err, path)
	}
}
