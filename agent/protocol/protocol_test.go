package protocol

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestDefaultValid(t *testing.T) {
	if err := Default().Validate(); err != nil {
		t.Fatalf("Default().Validate() = %v, want nil", err)
	}
}

func TestInvalidMessageIsSearchR1(t *testing.T) {
	// Search-R1 search_r1/llm_agent/generation.py, execute_predictions, joined.
	want := "\nMy previous action is invalid. If I want to search, I should put the query between <search> and </search>. If I want to give the final answer, I should put the answer between <answer> and </answer>. Let me try again.\n"
	if got := Default().Invalid; got != want {
		t.Errorf("Default().Invalid = %q, want %q", got, want)
	}
}

func TestParse(t *testing.T) {
	tests := []struct {
		name    string
		json    string
		wantErr bool
		check   func(*Protocol) bool
	}{
		{"empty object keeps defaults", `{}`, false, func(p *Protocol) bool { return p.Memory.Open == "<mem>" }},
		{"mem1 style", `{"name":"mem1","memory":{"open":"<think>","close":"</think>"},"think":{"open":"","close":""}}`, false,
			func(p *Protocol) bool { return p.Memory.Open == "<think>" && p.Think.absent() }},
		{"search-r1 style", `{"memory":{"open":"","close":""},"lenient":true}`, false, func(p *Protocol) bool { return p.Lenient }},
		{"tool call style", `{"search":{"open":"<tool_call>","close":"</tool_call>"},"search_json":"arguments.query"}`, false,
			func(p *Protocol) bool { return p.Search.Open == "<tool_call>" }},
		{"unknown key", `{"memroy":{"open":"<m>","close":"</m>"}}`, true, nil},
		{"half tag", `{"think":{"open":"<think>","close":""}}`, true, nil},
		{"memory equals think", `{"memory":{"open":"<think>","close":"</think>"}}`, true, nil},
		{"no docs placeholder", `{"observation":"<information></information>"}`, true, nil},
		{"same action tags", `{"answer":{"open":"<search>","close":"</answer>"}}`, true, nil},
		{"trailing data", `{} {}`, true, nil},
		{"not json", `{"name":`, true, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Parse([]byte(tt.json))
			if tt.wantErr {
				if !errors.Is(err, ErrProtocol) {
					t.Fatalf("Parse(%s) error = %v, want ErrProtocol", tt.json, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse(%s) = %v", tt.json, err)
			}
			if !tt.check(p) {
				t.Errorf("Parse(%s) = %+v, fields not applied", tt.json, p)
			}
		})
	}
}

func TestLoadNamesFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bad.json")
	if err := os.WriteFile(path, []byte(`{"colour":1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Load(path)
	if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "colour") {
		t.Fatalf("Load(%s) = %v, want an error naming the file and the key", path, err)
	}
	good := filepath.Join(t.TempDir(), "good.json")
	if err := os.WriteFile(good, []byte(`{"name":"x"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := Load(good)
	if err != nil || p.Name != "x" {
		t.Fatalf("Load(%s) = %v, %v; want name x", good, p, err)
	}
}

func TestPrompt(t *testing.T) {
	p := Default()
	got := p.Prompt("Who founded Ax?; Where is Bo?", 2)
	for _, want := range []string{
		"<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n",
		"The question has 2 parts",
		"Question: Who founded Ax?; Where is Bo?\n<|im_end|>\n<|im_start|>assistant\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("Prompt() = %q, missing %q", got, want)
		}
	}
	if !strings.HasSuffix(got, "<|im_start|>assistant\n") {
		t.Errorf("Prompt() = %q, want it to end with the assistant header", got)
	}
}

func TestObservation(t *testing.T) {
	docs := []Doc{{ID: "1", Contents: "\"Ax\"\nAx is a firm."}, {ID: "2", Contents: "\"Bo\"\nBo is a city.\nIt is old."}}
	got := Default().Observation(docs)
	want := "\n\n<information>Doc 1(Title: \"Ax\") Ax is a firm.\nDoc 2(Title: \"Bo\") Bo is a city.\nIt is old.</information>\n\n"
	if got != want {
		t.Errorf("Observation() = %q, want %q", got, want)
	}
}

func TestAnswers(t *testing.T) {
	p := Default()
	got := p.Answers(" Ax ;Bo;  1987 ")
	want := []string{"Ax", "Bo", "1987"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("Answers() = %q, want %q", got, want)
	}
	if got := p.JoinAnswers(want); got != "Ax; Bo; 1987" {
		t.Errorf("JoinAnswers() = %q, want %q", got, "Ax; Bo; 1987")
	}
}

// TestFromConfig: the protocol under a resolved config's "protocol" key, none without
// it, and an error for a config that is not JSON or a protocol that does not parse.
func TestFromConfig(t *testing.T) {
	p, ok, err := FromConfig([]byte(`{"seed": 1, "protocol": {"name": "x"}}`))
	if err != nil || !ok || p.Name != "x" || p.Memory != Default().Memory {
		t.Errorf("FromConfig(with a protocol) = %+v, %v, %v", p, ok, err)
	}
	for _, none := range []string{``, `{}`, `{"seed": 1}`} {
		if p, ok, err := FromConfig([]byte(none)); p != nil || ok || err != nil {
			t.Errorf("FromConfig(%q) = %v, %v, %v; want none", none, p, ok, err)
		}
	}
	for _, bad := range []string{`{`, `{"protocol": {"memory": 3}}`} {
		if _, ok, err := FromConfig([]byte(bad)); ok || err == nil {
			t.Errorf("FromConfig(%q) = ok %v, %v; want an error", bad, ok, err)
		}
	}
}
