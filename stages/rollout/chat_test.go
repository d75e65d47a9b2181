package rollout

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mempo/mempo/agent/protocol"
	"github.com/mempo/mempo/format"
	"github.com/mempo/mempo/format/formattest"
	"github.com/mempo/mempo/jobs"
	"github.com/mempo/mempo/model/bpe"
)

// foreignPolicy copies the fixture's policy without its commit record, as a user's
// transformers checkpoint comes, with tokenizer_config.json's chat_template set to
// template ("" removes the file).
func foreignPolicy(t *testing.T, f *fixture, template string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "policy")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(f.policy)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.IsDir() || e.Name() == format.CommitFile {
			continue
		}
		if err := jobs.CopyFile(filepath.Join(dir, e.Name()), filepath.Join(f.policy, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(dir, bpe.ConfigFile)
	if template == "" {
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	var conf map[string]any
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &conf); err != nil {
		t.Fatal(err)
	}
	conf["chat_template"] = template
	if data, err = json.Marshal(conf); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestRunChatTemplate: the first context is rendered with the policy's own chat
// template (Qwen2.5-Instruct's, which adds its default system message when the
// protocol has none), with the protocol's chat glue under --chat-template protocol, and
// with the glue and a warning when the checkpoint has no template.
func TestRunChatTemplate(t *testing.T) {
	f := testFixture(t)
	qwen25, err := os.ReadFile(filepath.Join("..", "..", "model", "chat", "testdata", "qwen2.5-instruct.jinja"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.N, cfg.MaxTurns, cfg.PromptLimit = 1, 1, 1
	p := protocol.Default()
	p.System = ""
	cfg.Protocol = p
	prompts, err := format.ReadPrompts(f.train)
	if err != nil {
		t.Fatal(err)
	}
	q := slices.MinFunc(prompts, func(a, b format.Prompt) int { return strings.Compare(a.UID, b.UID) }) // PromptLimit's first
	user := p.UserMessage(q.Question, len(q.Golds))
	qwenPrompt := "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n" +
		"<|im_start|>user\n" + user + "<|im_end|>\n<|im_start|>assistant\n"
	gluePrompt := p.Prompt(q.Question, len(q.Golds))
	tests := []struct {
		name, template, mode, want string
		warn                       bool
	}{
		{"checkpoint", string(qwen25), "", qwenPrompt, false},
		{"protocol", string(qwen25), "protocol", gluePrompt, false},
		{"no template", "", "", gluePrompt, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := cfg
			c.ChatTemplate = tt.mode
			policy := foreignPolicy(t, f, tt.template)
			var log bytes.Buffer
			out := filepath.Join(t.TempDir(), "rollouts")
			gen := newScripted(f.tok, pathsScript)
			spec := jobs.Spec{Out: out, Log: slog.New(slog.NewTextHandler(&log, nil))}
			if _, err := run(context.Background(), c, Inputs{Prompts: f.train, Policy: policy, Index: f.index}, spec, gen.loader()); err != nil {
				t.Fatal(err)
			}
			rows, err := format.ReadDataset[format.Rollout](out)
			if err != nil {
				t.Fatal(err)
			}
			if len(rows) == 0 || rows[0].UID != q.UID || rows[0].Turn != 0 {
				t.Fatalf("rows %d, first %s turn %d; want the first turn of %s", len(rows), rows[0].UID, rows[0].Turn, q.UID)
			}
			if got := f.tok.Decode(rows[0].PromptIDs); got != tt.want {
				t.Errorf("first context:\n%q\nwant\n%q", got, tt.want)
			}
			if warned := strings.Contains(log.String(), "no chat template"); warned != tt.warn {
				t.Errorf("warned of a missing template = %v, want %v; log:\n%s", warned, tt.warn, log.String())
			}
		})
	}
}

// TestRunSourcePrompt: a prompt that carries its source's own messages (an imported
// chat prompt) starts from them, rendered with the policy's template, instead of the
// protocol's system message and user template around its question.
func TestRunSourcePrompt(t *testing.T) {
	f := testFixture(t)
	qwen25, err := os.ReadFile(filepath.Join("..", "..", "model", "chat", "testdata", "qwen2.5-instruct.jinja"))
	if err != nil {
		t.Fatal(err)
	}
	user := "Answer with one name inside <answer> and </answer>. Question: who founded Acme?\n"
	row := format.Prompt{UID: "src00001", DataSource: "nq", Split: "train", SourceIndex: []int64{0},
		Question: "who founded Acme?", Golds: [][]string{{"Ada"}}, User: user}
	prompts := filepath.Join(t.TempDir(), "prompts")
	if _, err := formattest.WriteDataset(prompts, "test", [][]format.Prompt{{row}}); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.N, cfg.MaxTurns = 1, 1
	out := filepath.Join(t.TempDir(), "rollouts")
	gen := newScripted(f.tok, pathsScript)
	if _, err := run(context.Background(), cfg, Inputs{Prompts: prompts, Policy: foreignPolicy(t, f, string(qwen25)), Index: f.index}, jobs.Spec{Out: out}, gen.loader()); err != nil {
		t.Fatal(err)
	}
	rows, err := format.ReadDataset[format.Rollout](out)
	if err != nil {
		t.Fatal(err)
	}
	want := "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n" +
		"<|im_start|>user\n" + user + "<|im_end|>\n<|im_start|>assistant\n"
	if got := f.tok.Decode(rows[0].PromptIDs); got != want {
		t.Errorf("first context:\n%q\nwant\n%q", got, want)
	}
}
