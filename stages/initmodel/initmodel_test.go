package initmodel

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/mempo/mempo/agent/protocol"
	"github.com/mempo/mempo/agent/task"
	"github.com/mempo/mempo/format"
	"github.com/mempo/mempo/format/formattest"
	"github.com/mempo/mempo/jobs"
	"github.com/mempo/mempo/jobs/jobstest"
	"github.com/mempo/mempo/model/bpe"
	"github.com/mempo/mempo/model/qwen2"
	"github.com/mempo/mempo/model/safetensors"
)

// smallWorld is a small synthetic world: 24 people, 20 other entities, 12 questions.
func smallWorld(t *testing.T) *task.World {
	t.Helper()
	cfg := task.DefaultConfig()
	cfg.People, cfg.Cities, cfg.Companies, cfg.Countries = 24, 8, 8, 4
	cfg.Train, cfg.Test, cfg.TestK = 12, 2, []int{2}
	w, err := task.Generate(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// smallCorpus writes the corpus of smallWorld and returns its path.
func smallCorpus(t *testing.T) string {
	t.Helper()
	w := smallWorld(t)
	var buf bytes.Buffer
	if err := task.WriteJSONL(&buf, w.Docs()); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "corpus.jsonl")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func testConfig() Config {
	cfg := DefaultConfig()
	cfg.VocabSize = 700
	return cfg
}

// readDir returns every file of dir by name.
func readDir(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		files[e.Name()] = b
	}
	return files
}

func TestRunDeterministicCheckpoint(t *testing.T) {
	corpus := smallCorpus(t)
	root := t.TempDir()
	var runs []map[string][]byte
	for _, name := range []string{"a", "b"} {
		res, err := Run(context.Background(), testConfig(), Inputs{Corpus: []string{corpus}}, jobs.Spec{Out: filepath.Join(root, name)})
		if err != nil {
			t.Fatal(err)
		}
		if res.Hit {
			t.Fatalf("Run into a fresh %s = cache hit, want a build", name)
		}
		runs = append(runs, readDir(t, res.Dir))
	}
	names := slices.Sorted(func(yield func(string) bool) {
		for n := range runs[0] {
			if !yield(n) {
				return
			}
		}
	})
	want := []string{format.CommitFile, "config.json", "generation_config.json", safetensors.SingleFile,
		bpe.SpecialTokensFile, format.TokenizerFile, bpe.ConfigFile}
	if !slices.Equal(names, want) {
		t.Fatalf("checkpoint files = %q, want %q", names, want)
	}
	for _, n := range names {
		if !bytes.Equal(runs[0][n], runs[1][n]) {
			t.Errorf("%s differs between two runs with the same inputs", n)
		}
	}
	entries, _ := os.ReadDir(root)
	if len(entries) != 2 {
		t.Errorf("after two runs %s holds %d entries, want only a and b (no temp dirs left)", root, len(entries))
	}

	dir := filepath.Join(root, "a")
	// init-model commits like every checkpoint writer: checkpoint.json, files 0644.
	c, err := format.ReadCommit(dir)
	if err != nil || c.Stage != Stage || len(c.Files) != len(want)-1 {
		t.Errorf("ReadCommit(%s) = %+v, %v; want stage %s and the other %d files", dir, c, err, Stage, len(want)-1)
	}
	jobstest.CheckModes(t, dir)
	if in, err := jobs.CheckpointInput("init", dir); err != nil || !strings.HasPrefix(in.Digest, "checkpoint:") {
		t.Errorf("CheckpointInput(%s) = %+v, %v; want it keyed by its commit record", dir, in, err)
	}
	tok, err := bpe.Load(filepath.Join(dir, format.TokenizerFile))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := qwen2.ReadConfig(filepath.Join(dir, qwen2.ConfigFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.CheckVocab(tok.VocabSize()); err != nil || cfg.VocabSize%vocabMultiple != 0 || cfg.VocabSize-tok.VocabSize() >= vocabMultiple {
		t.Errorf("vocab_size %d for a %d-token tokenizer (%v), want the next multiple of %d", cfg.VocabSize, tok.VocabSize(), err, vocabMultiple)
	}
	var gen struct {
		EOS *int `json:"eos_token_id"`
	}
	if err := json.Unmarshal(runs[0]["generation_config.json"], &gen); err != nil {
		t.Fatal(err)
	}
	imEnd, _ := tok.Special(bpe.ImEnd)
	if gen.EOS == nil || *gen.EOS != int(imEnd) {
		t.Errorf("generation_config.json eos_token_id = %v, want %d (%s)", gen.EOS, imEnd, bpe.ImEnd)
	}
	// tokenizer_config.json names config.json's eos and bos, so transformers agrees with
	// the model on them.
	var tc struct {
		EOS string `json:"eos_token"`
		BOS string `json:"bos_token"`
		Pad string `json:"pad_token"`
		Max int    `json:"model_max_length"`
	}
	if err := json.Unmarshal(runs[0][bpe.ConfigFile], &tc); err != nil {
		t.Fatalf("parse %s: %v", bpe.ConfigFile, err)
	}
	for _, c := range []struct {
		field, token string
		want         *int
	}{{"eos_token", tc.EOS, cfg.EOSTokenID}, {"bos_token", tc.BOS, cfg.BOSTokenID}, {"pad_token", tc.Pad, cfg.BOSTokenID}} {
		id, ok := tok.Special(c.token)
		if !ok || c.want == nil || int(id) != *c.want {
			t.Errorf("%s %s = %q (id %d, special %v), want config.json's id %v", bpe.ConfigFile, c.field, c.token, id, ok, c.want)
		}
	}
	if tc.Max != cfg.MaxPositions {
		t.Errorf("%s model_max_length = %d, want max_position_embeddings %d", bpe.ConfigFile, tc.Max, cfg.MaxPositions)
	}
	for _, tag := range bpe.DefaultSpecial() {
		if ids := tok.Encode(tag); len(ids) != 1 {
			t.Errorf("Encode(%q) = %v, want one special token", tag, ids)
		}
	}
	// The protocol's glue was in the training texts, so it encodes in few tokens: the
	// user message's words are whole tokens, not bytes.
	p := protocol.Default()
	prompt := p.Prompt("", 2)
	if n := len(tok.Encode(prompt)); n*4 > len(prompt) {
		t.Errorf("the prompt template (%d bytes) encodes to %d tokens, want at most one per 4 bytes", len(prompt), n)
	} else {
		t.Logf("prompt template: %d bytes -> %d tokens", len(prompt), n)
	}
	m, err := qwen2.Load(dir, qwen2.Options{})
	if err != nil {
		t.Fatal(err)
	}
	m.Drop()
}

func TestRunCache(t *testing.T) {
	corpus := smallCorpus(t)
	out := filepath.Join(t.TempDir(), "policy")
	in := Inputs{Corpus: []string{corpus}}
	first, err := Run(context.Background(), testConfig(), in, jobs.Spec{Out: out})
	if err != nil {
		t.Fatal(err)
	}
	before := readDir(t, out)
	st, _ := os.Stat(filepath.Join(out, safetensors.SingleFile))

	again, err := Run(context.Background(), testConfig(), in, jobs.Spec{Out: out})
	if err != nil || !again.Hit {
		t.Fatalf("second Run = hit %v, %v; want a cache hit", again != nil && again.Hit, err)
	}
	if again.Key != first.Key || again.Commit.CacheKey != first.Key.String() {
		t.Errorf("cache hit key %s (record %.12s), want %s", again.Key.Short(), again.Commit.CacheKey, first.Key.Short())
	}
	if again.TokenizerVocab != first.TokenizerVocab || again.ModelVocab != first.ModelVocab || again.Params != first.Params {
		t.Errorf("cache hit reports tokenizer %d, vocab_size %d, %d params; the build reported %d, %d, %d",
			again.TokenizerVocab, again.ModelVocab, again.Params, first.TokenizerVocab, first.ModelVocab, first.Params)
	}
	if st2, _ := os.Stat(filepath.Join(out, safetensors.SingleFile)); !st2.ModTime().Equal(st.ModTime()) {
		t.Errorf("a cache hit rewrote %s", safetensors.SingleFile)
	}

	forced, err := Run(context.Background(), testConfig(), in, jobs.Spec{Out: out, Force: true})
	if err != nil || forced.Hit {
		t.Fatalf("Run --force = hit %v, %v; want a rebuild", forced != nil && forced.Hit, err)
	}
	after := readDir(t, out)
	for n, b := range before {
		if !bytes.Equal(after[n], b) {
			t.Errorf("--force rebuild changed %s", n)
		}
	}

	reseed := testConfig()
	reseed.Seed = 2
	other, err := Run(context.Background(), reseed, in, jobs.Spec{Out: out})
	if err != nil || other.Hit {
		t.Fatalf("Run with another seed = hit %v, %v; want a rebuild", other != nil && other.Hit, err)
	}
	now := readDir(t, out)
	if bytes.Equal(now[safetensors.SingleFile], before[safetensors.SingleFile]) {
		t.Errorf("seed 2 wrote the same weights as seed 1")
	}
	if !bytes.Equal(now[format.TokenizerFile], before[format.TokenizerFile]) {
		t.Errorf("the seed changed tokenizer.json; training has no randomness")
	}

	// A damaged checkpoint is a miss, rebuilt, not trusted.
	if err := os.Truncate(filepath.Join(out, safetensors.SingleFile), 10); err != nil {
		t.Fatal(err)
	}
	fixed, err := Run(context.Background(), reseed, in, jobs.Spec{Out: out})
	if err != nil || fixed.Hit {
		t.Fatalf("Run over a truncated %s = hit %v, %v; want a rebuild", safetensors.SingleFile, fixed != nil && fixed.Hit, err)
	}
	if got := readDir(t, out)[safetensors.SingleFile]; !bytes.Equal(got, now[safetensors.SingleFile]) {
		t.Errorf("rebuilt %s differs from the first build of the same inputs", safetensors.SingleFile)
	}
}

func TestRunErrors(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.jsonl")
	if err := os.WriteFile(empty, []byte("\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad.jsonl")
	if err := os.WriteFile(bad, []byte(`{"id": "1", "contents": "\"A\"\nx"}`+"\n{not json\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	badPreset := testConfig()
	badPreset.Preset = "huge"
	tests := []struct {
		name    string
		cfg     Config
		corpus  []string
		wantMsg string
	}{
		{"no corpus", testConfig(), nil, "--corpus"},
		{"missing file", testConfig(), []string{filepath.Join(dir, "nope.jsonl")}, "nope.jsonl"},
		{"empty corpus", testConfig(), []string{empty}, "no documents"},
		{"bad line", testConfig(), []string{bad}, "bad.jsonl: line 2"},
		{"bad preset", badPreset, []string{empty}, "huge"},
		{"small vocab", Config{VocabSize: 100, MinFrequency: 1, Preset: "tiny"}, []string{empty}, "--vocab 100"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := filepath.Join(dir, "out-"+strings.ReplaceAll(tt.name, " ", "-"))
			_, err := Run(context.Background(), tt.cfg, Inputs{Corpus: tt.corpus}, jobs.Spec{Out: out})
			if err == nil || !strings.Contains(err.Error(), tt.wantMsg) {
				t.Fatalf("Run = %v, want an error naming %q", err, tt.wantMsg)
			}
			if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("after a failed run %s exists (%v), want nothing written", out, err)
			}
			if m, _ := filepath.Glob(out + ".tmp-*"); len(m) != 0 {
				t.Errorf("temp dirs left: %q", m)
			}
		})
	}
}

func TestRunLearnsQuestions(t *testing.T) {
	w := smallWorld(t)
	corpus := smallCorpus(t)
	rows := make([]format.Prompt, len(w.Train))
	for i, p := range w.Train {
		rows[i] = format.Prompt{UID: p.UID, Question: p.Question, Golds: p.Golds}
	}
	root := t.TempDir()
	prompts := filepath.Join(root, "prompts")
	if _, err := formattest.WriteDataset(prompts, "test", [][]format.Prompt{rows}); err != nil {
		t.Fatal(err)
	}
	count := func(in Inputs, name string) (int, *Result) {
		res, err := Run(context.Background(), testConfig(), in, jobs.Spec{Out: filepath.Join(root, name)})
		if err != nil {
			t.Fatal(err)
		}
		tok, err := bpe.Load(filepath.Join(res.Dir, format.TokenizerFile))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, p := range w.Train {
			n += len(tok.Encode(p.Question))
		}
		return n, res
	}
	without, a := count(Inputs{Corpus: []string{corpus}}, "corpus-only")
	with, b := count(Inputs{Corpus: []string{corpus}, Prompts: []string{prompts}}, "with-prompts")
	t.Logf("training questions: %d tokens from a corpus-only tokenizer, %d with --prompts", without, with)
	if with >= without {
		t.Errorf("questions encode to %d tokens with --prompts, %d without; want fewer with", with, without)
	}
	if a.Key == b.Key || len(b.Commit.Inputs) != 2 || !strings.HasPrefix(b.Commit.Inputs[1].Digest, "dataset:") {
		t.Errorf("--prompts is not keyed: keys %s and %s, inputs %+v", a.Key.Short(), b.Key.Short(), b.Commit.Inputs)
	}
}

// TestChatTemplateIsProtocolGlue: the checkpoints' chat template is ChatML (bpe.ChatTemplate
// renders what bpe.ChatML renders), and ChatML of the system and user messages with the
// generation prompt is exactly the prompt the rollout encodes, for the default protocol
// and the demo's.
func TestChatTemplateIsProtocolGlue(t *testing.T) {
	demo, err := protocol.Load(filepath.Join("..", "..", "pipelines", "demo-protocol.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []*protocol.Protocol{protocol.Default(), demo} {
		t.Run(p.Name, func(t *testing.T) {
			question, k := "who founded Acme; where is it", 2
			user := strings.NewReplacer("{question}", question, "{k}", strconv.Itoa(k)).Replace(p.User)
			got := bpe.ChatML([]bpe.Message{{Role: "system", Content: p.System}, {Role: "user", Content: user}}, true)
			if want := p.Prompt(question, k); got != want {
				t.Errorf("ChatML(system, user, generate) = %q, want the protocol's prompt %q", got, want)
			}
		})
	}
}
