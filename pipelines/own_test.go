//go:build cgo

// The own-data test writes its checkpoint with the tensor code where no Python has
// transformers, so it builds only where cgo does (make test-torch).

package pipelines

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mempo/mempo/agent/protocol"
	"github.com/mempo/mempo/agent/task"
	"github.com/mempo/mempo/format"
	"github.com/mempo/mempo/jobs"
	"github.com/mempo/mempo/model/bpe"
	"github.com/mempo/mempo/model/qwen2"
)

// qwenTokenizer is where build/fixtures.sh links the pinned Qwen3 tokenizer.json; its
// tokenizer_config.json lies beside the link's target.
var qwenTokenizer = filepath.Join("..", "model", "bpe", "testdata", "qwen3", "tokenizer.json")

// qwen25Template is Qwen2.5-Instruct's chat template, which adds its default system
// message when a conversation has none.
var qwen25Template = filepath.Join("..", "model", "chat", "testdata", "qwen2.5-instruct.jinja")

// qwenSystem is what Qwen2.5-Instruct's template renders before a user message when
// there is no system message.
const qwenSystem = "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n<|im_start|>user\n"

// ownData writes what a user brings: FlashRAG/Search-R1 JSONL questions (train and
// test) and a Search-R1 corpus, from a small synthetic world.
func ownData(t *testing.T, dir string) (train, test, corpus string) {
	t.Helper()
	w, err := task.Generate(task.Config{Seed: 5, People: 40, Cities: 12, Companies: 12, Countries: 4, TwinRate: 0.2, TwoHopRate: 0.2,
		TrainK: 1, Train: 16, TestK: []int{1}, Test: 4})
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string, ps []task.Prompt) string {
		var b bytes.Buffer
		for i, p := range ps {
			line, _ := json.Marshal(map[string]any{"id": fmt.Sprintf("%s_%d", name, i), "question": p.Question,
				"golden_answers": p.Golds[0], "data_source": "hotpotqa"})
			b.Write(append(line, '\n'))
		}
		path := filepath.Join(dir, name+".jsonl")
		if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	var c bytes.Buffer
	if err := task.WriteJSONL(&c, w.Docs()); err != nil {
		t.Fatal(err)
	}
	corpus = filepath.Join(dir, "wiki.jsonl")
	if err := os.WriteFile(corpus, c.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return write("train", w.Train), write("test", w.Test), corpus
}

// torchPython is a Python with torch and transformers: MEMPO_TEST_PYTHON, else the
// benchmark environment; "" when there is none.
func torchPython() string {
	home, _ := os.UserHomeDir()
	for _, p := range []string{os.Getenv("MEMPO_TEST_PYTHON"), filepath.Join(home, ".cache", "mempo", "bench-venv", "bin", "python")} {
		if p != "" && exec.Command(p, "-c", "import torch, transformers").Run() == nil {
			return p
		}
	}
	return ""
}

// pretrained writes a tiny random Qwen2 checkpoint over the Qwen3 fixture's vocabulary
// with Qwen2.5-Instruct's chat template, as a user's checkpoint comes: made by
// transformers where a Python has it (testdata/make_tiny_qwen2.py), else the same
// layout from Go.
func pretrained(t *testing.T, py, dir string) {
	t.Helper()
	tokJSON, err := filepath.EvalSymlinks(qwenTokenizer)
	if err != nil {
		t.Fatalf("Qwen3 tokenizer fixture: %v; run build/fixtures.sh", err)
	}
	tokConfig := filepath.Join(filepath.Dir(tokJSON), bpe.ConfigFile)
	if py != "" {
		cmd := exec.Command(py, filepath.Join("testdata", "make_tiny_qwen2.py"), tokJSON, tokConfig, qwen25Template, dir)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("make_tiny_qwen2.py: %v\n%s", err, out)
		}
		return
	}
	tok, err := bpe.Load(tokJSON)
	if err != nil {
		t.Fatal(err)
	}
	eos, _ := tok.Special(bpe.ImEnd)
	bos, _ := tok.Special(bpe.EndOfText)
	e, b := int(eos), int(bos)
	cfg := qwen2.Config{Architectures: []string{qwen2.Architecture}, HiddenSize: 32, IntermediateSize: 64, NumLayers: 2,
		NumHeads: 4, NumKVHeads: 2, RopeTheta: 10000, MaxPositions: 4096, RMSNormEps: 1e-6, VocabSize: tok.VocabSize(),
		TieEmbedding: true, TorchDType: "float32", HiddenAct: "silu", EOSTokenID: &e, BOSTokenID: &b}
	m, err := qwen2.New(cfg, qwen2.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Drop()
	if err := m.Init(0); err != nil {
		t.Fatal(err)
	}
	if err := m.Save(dir, 0); err != nil {
		t.Fatal(err)
	}
	if err := jobs.CopyFile(filepath.Join(dir, format.TokenizerFile), tokJSON); err != nil {
		t.Fatal(err)
	}
	var conf map[string]any
	data, err := os.ReadFile(tokConfig)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &conf); err != nil {
		t.Fatal(err)
	}
	tmpl, err := os.ReadFile(qwen25Template)
	if err != nil {
		t.Fatal(err)
	}
	conf["chat_template"], conf["eos_token"], conf["pad_token"] = string(tmpl), bpe.ImEnd, bpe.EndOfText
	if data, err = json.Marshal(conf); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, bpe.ConfigFile), data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestOwnData runs pipelines/run.mk end to end as a user coming from Search-R1 would:
// their JSONL questions and corpus and a pretrained Qwen2 checkpoint with
// Qwen2.5-Instruct's chat template, two MemPO iterations, then the evaluation of the
// start, the trained policy and the full-context baseline on the test split. Every
// iteration's prompts are rendered with the checkpoint's own template (its default
// system message, the protocol having none), the trained policy keeps the template, and
// a second make runs nothing. Where a Python has torch and transformers, the checkpoint
// is made by transformers and transformers' apply_chat_template of the trained
// policy gives the prompt ids its rollouts hold.
func TestOwnData(t *testing.T) {
	dir := t.TempDir()
	bin := buildBinaries(t, dir)
	train, test, corpus := ownData(t, dir)
	py := torchPython()
	model := filepath.Join(dir, "Qwen2-tiny")
	pretrained(t, py, model)
	proto := filepath.Join(dir, "protocol.json")
	if err := os.WriteFile(proto, []byte(`{"system": ""}`), 0o644); err != nil {
		t.Fatal(err)
	}
	run := filepath.Join(dir, "run")
	make := func() string {
		t.Helper()
		cmd := exec.Command("make", "--no-print-directory", "-j2", "-f", "run.mk", "BIN="+bin, "RUN_DIR="+run,
			"DATA="+train, "TEST_DATA="+test, "CORPUS="+corpus, "MODEL="+model, "PROTOCOL="+proto,
			"ITERS=2", "VARIANTS=mempo", "PROMPTS_PER_ITER=2",
			"ROLLOUT_FLAGS=--n 2 --max-turns 2 --max-new-tokens 12 --threads 1",
			"LOGPROB_FLAGS=--threads 1", "UPDATE_FLAGS=--lr 1e-4 --mini-batches 1 --threads 1",
			"EVAL_FLAGS=--max-turns 2 --max-new-tokens 12 --threads 1", "STAGE_FLAGS=--progress none --log-level warn")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("make -f run.mk: %v\n%s", err, out)
		}
		return string(out)
	}
	make()
	table, err := os.ReadFile(filepath.Join(run, "eval", "results.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, row := range []string{"| start | 1 |", "| mempo | 1 |", "| full | 1 |"} {
		if !strings.Contains(string(table), row) {
			t.Errorf("results.md has no row %q:\n%s", row, table)
		}
	}
	tok, err := bpe.Load(filepath.Join(model, format.TokenizerFile))
	if err != nil {
		t.Fatal(err)
	}
	var first format.Rollout
	for _, k := range []int{1, 2} {
		rows, err := format.ReadDataset[format.Rollout](filepath.Join(run, "mempo", fmt.Sprintf("iter-%d", k), "rollouts"))
		if err != nil {
			t.Fatal(err)
		}
		if k == 2 {
			first = rows[0]
		}
		if got := tok.Decode(rows[0].PromptIDs); !strings.HasPrefix(got, qwenSystem+"Answer the given question.") {
			t.Errorf("iteration %d's first prompt is not the checkpoint template's rendering:\n%q", k, got)
		}
	}
	policy := filepath.Join(run, "mempo", "iter-2", "policy")
	want, _ := os.ReadFile(qwen25Template)
	var conf struct {
		ChatTemplate string `json:"chat_template"`
	}
	if data, err := os.ReadFile(filepath.Join(policy, bpe.ConfigFile)); err != nil || json.Unmarshal(data, &conf) != nil || conf.ChatTemplate != string(want) {
		t.Errorf("the trained policy's chat template is not the checkpoint's (%v)", err)
	}
	if again := make(); strings.Contains(again, bin) {
		t.Errorf("a second make ran stages:\n%s", again)
	}
	if py == "" {
		t.Log("no Python with torch and transformers: the checkpoint was written from Go, and transformers did not load the trained policy")
		return
	}
	prompts, err := format.ReadDataset[format.Prompt](filepath.Join(run, "data", "train"))
	if err != nil {
		t.Fatal(err)
	}
	var question string
	for _, p := range prompts {
		if p.UID == first.UID {
			question = p.Question
		}
	}
	user := protocol.Default().UserMessage(question, 1)
	script := `import json, sys, transformers
tok = transformers.AutoTokenizer.from_pretrained(sys.argv[1])
transformers.AutoModelForCausalLM.from_pretrained(sys.argv[1])
print(json.dumps(tok.apply_chat_template([{"role": "user", "content": sys.argv[2]}], add_generation_prompt=True)))`
	out, err := exec.Command(py, "-c", script, policy, user).Output()
	if err != nil {
		t.Fatalf("transformers on the trained policy: %v", err)
	}
	var ids []int32
	if err := json.Unmarshal(out, &ids); err != nil {
		t.Fatalf("transformers printed %q: %v", out, err)
	}
	if !slices.Equal(ids, first.PromptIDs) {
		t.Errorf("apply_chat_template of the trained policy: %v, want the rollouts' prompt ids %v", ids, first.PromptIDs)
	}
}
