package format

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestFactHeld(t *testing.T) {
	for _, tt := range []struct {
		memory string
		fact   []string
		want   bool
	}{
		{"Zorvan Kell was born in Pelmora.", []string{"Zorvan Kell", "Pelmora"}, true},
		{"zorvan  KELL\nwas born in pelmora", []string{"Zorvan Kell", "Pelmora"}, true}, // case and white space
		{"Zorvan Kell was born somewhere", []string{"Zorvan Kell", "Pelmora"}, false},   // subject without value
		{"born in Pelmora", []string{"Zorvan Kell", "Pelmora"}, false},                  // value without subject
		{"anything", []string{" ", ""}, false},                                          // no phrase: never held
		{"anything", nil, false},
		{"The Eiffel Tower is in Paris.", []string{"the eiffel tower is in paris."}, true},
	} {
		if got := FactHeld(tt.memory, tt.fact); got != tt.want {
			t.Errorf("FactHeld(%q, %q) = %v, want %v", tt.memory, tt.fact, got, tt.want)
		}
	}
	facts := [][]string{{"A", "1"}, {"B", "2"}, {"C", "3"}}
	if n := FactsHeld("A is 1; B is 3", facts); n != 1 {
		t.Errorf("FactsHeld = %d, want 1", n)
	}
}

func TestHoldsFacts(t *testing.T) {
	i := func(v int32) *int32 { return &v }
	for _, tt := range []struct {
		l    Logprob
		want string
	}{
		{Logprob{}, ""},
		{Logprob{MemFacts: i(0)}, ""}, // no facts: unknown
		{Logprob{MemFacts: i(0), Facts: 3}, HoldsNone},
		{Logprob{MemFacts: i(2), Facts: 3}, HoldsSome},
		{Logprob{MemFacts: i(3), Facts: 3}, HoldsAll},
	} {
		if got := tt.l.HoldsFacts(); got != tt.want {
			t.Errorf("%+v: HoldsFacts = %q, want %q", tt.l, got, tt.want)
		}
	}
}

// An optional column is left out unless asked for, so rows that never fill it write
// the bytes they wrote before it existed (the golden shard pins those), and a shard
// without it reads back with the field zero.
func TestOptionalColumns(t *testing.T) {
	if got := OptionalColumns[Prompt](); !cmp.Equal(got, []string{"facts"}) {
		t.Errorf("OptionalColumns[Prompt] = %v", got)
	}
	if got := OptionalColumns[Logprob](); !cmp.Equal(got, []string{"mem_facts", "facts"}) {
		t.Errorf("OptionalColumns[Logprob] = %v", got)
	}
	dir := t.TempDir()
	rows := samplePrompts()
	rows[0].Facts = [][]string{{"Zorvan Kell", "Pelmora"}, {"The sentence."}}

	// Without WithOptional, a row holding facts is refused, not silently dropped.
	_, err := WriteFile(filepath.Join(dir, "refused.parquet"), rows)
	if err == nil || !strings.Contains(err.Error(), `optional column "facts"`) || !strings.Contains(err.Error(), "WithOptional") {
		t.Fatalf("writing facts without WithOptional: err = %v, want a refusal naming the column and the option", err)
	}
	if _, err := WriteFile(filepath.Join(dir, "bogus.parquet"), rows, WithOptional("golds")); err == nil || !strings.Contains(err.Error(), "not an optional column") {
		t.Fatalf("WithOptional(golds): err = %v, want not an optional column", err)
	}

	with := filepath.Join(dir, "with.parquet")
	if _, err := WriteFile(with, rows, WithOptional("facts")); err != nil {
		t.Fatal(err)
	}
	got, err := readFile[Prompt](with)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(rows, got, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("rows with facts (-want +got):\n%s", diff)
	}

	// Without facts and without the option: the same bytes as before the column.
	var plain, asked bytes.Buffer
	for _, c := range []struct {
		buf  *bytes.Buffer
		opts []Option
	}{{&plain, nil}, {&asked, []Option{WithOptional("facts")}}} {
		w, err := NewWriter[Prompt](c.buf, append(c.opts, WithRowGroupRows(2))...)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Write(samplePrompts()...); err != nil {
			t.Fatal(err)
		}
		if _, err := w.Close(); err != nil {
			t.Fatal(err)
		}
	}
	golden, err := os.ReadFile(filepath.Join("testdata", "prompts.parquet"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(plain.Bytes(), golden) {
		t.Error("prompts without facts no longer write the golden shard's bytes")
	}
	if bytes.Equal(asked.Bytes(), golden) {
		t.Error("WithOptional(facts) wrote no facts column")
	}
	// The shard without the column (the golden one, written before it existed) reads
	// with nil facts.
	old, err := readFile[Prompt](filepath.Join("testdata", "prompts.parquet"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range old {
		if p.Facts != nil {
			t.Errorf("uid %s: facts %v from a shard without the column", p.UID, p.Facts)
		}
	}
}
