package chat

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/mempo/mempo/model/bpe"
)

// qwenTokenizer is where build/fixtures.sh links the pinned Qwen3 tokenizer.json; the
// fixture's tokenizer_config.json, with Qwen3's chat template, lies beside its target.
var qwenTokenizer = filepath.Join("..", "bpe", "testdata", "qwen3", "tokenizer.json")

// fixture loads the Qwen3 tokenizer and the path of its tokenizer_config.json. A
// missing fixture fails the test: goldens never skip.
func fixture(t *testing.T) (*bpe.Tokenizer, string) {
	t.Helper()
	target, err := filepath.EvalSymlinks(qwenTokenizer)
	if err != nil {
		t.Fatalf("Qwen3 tokenizer fixture: %v; run build/fixtures.sh", err)
	}
	tok, err := bpe.Load(target)
	if err != nil {
		t.Fatalf("%v; run build/fixtures.sh", err)
	}
	return tok, filepath.Join(filepath.Dir(target), bpe.ConfigFile)
}

type goldenFile struct {
	Transformers string `json:"transformers"`
	Goldens      []struct {
		Template string  `json:"template"`
		Case     string  `json:"case"`
		Generate bool    `json:"generate"`
		Text     string  `json:"text"`
		IDs      []int32 `json:"ids"`
	} `json:"goldens"`
}

type caseFile struct {
	Cases []struct {
		Name     string        `json:"name"`
		Messages []bpe.Message `json:"messages"`
	} `json:"cases"`
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// templates are the goldens' templates: Qwen2.5-Instruct's, the Qwen3 fixture's own
// (through its tokenizer_config.json, special tokens and all) and the project's ChatML.
func templates(t *testing.T, qwen3Config string) map[string]*Template {
	t.Helper()
	out := map[string]*Template{}
	for _, name := range []string{"qwen2.5-instruct", "mempo-chatml"} {
		src, err := os.ReadFile(filepath.Join("testdata", name+".jinja"))
		if err != nil {
			t.Fatal(err)
		}
		if out[name], err = Parse(string(src), map[string]any{"eos_token": bpe.ImEnd}); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	data, err := os.ReadFile(qwen3Config)
	if err != nil {
		t.Fatal(err)
	}
	if out["qwen3"], err = ParseConfig(data); err != nil {
		t.Fatalf("qwen3: %v", err)
	}
	return out
}

// TestGoldens renders every case of testdata/cases.json with each template, with and
// without the generation prompt, and encodes the text with the Qwen3 fixture: text and
// ids equal to what transformers' apply_chat_template gave (testdata/goldens.json,
// written by testdata/gen_goldens.py).
func TestGoldens(t *testing.T) {
	tok, config := fixture(t)
	tmpls := templates(t, config)
	var cases caseFile
	readJSON(t, filepath.Join("testdata", "cases.json"), &cases)
	messages := map[string][]bpe.Message{}
	for _, c := range cases.Cases {
		messages[c.Name] = c.Messages
	}
	var g goldenFile
	readJSON(t, filepath.Join("testdata", "goldens.json"), &g)
	if len(g.Goldens) != len(tmpls)*len(cases.Cases)*2 {
		t.Fatalf("%d goldens for %d templates and %d cases: regenerate testdata/goldens.json", len(g.Goldens), len(tmpls), len(cases.Cases))
	}
	for _, want := range g.Goldens {
		text, err := tmpls[want.Template].Render(messages[want.Case], want.Generate)
		if err != nil {
			t.Errorf("%s/%s/generate=%v: %v", want.Template, want.Case, want.Generate, err)
			continue
		}
		if diff := cmp.Diff(want.Text, text); diff != "" {
			t.Errorf("%s/%s/generate=%v: text (-transformers +go):\n%s", want.Template, want.Case, want.Generate, diff)
			continue
		}
		if diff := cmp.Diff(want.IDs, tok.Encode(text)); diff != "" {
			t.Errorf("%s/%s/generate=%v: ids (-transformers +go):\n%s", want.Template, want.Case, want.Generate, diff)
		}
	}
}

// TestChatMLTemplateFile: the goldens' mempo-chatml template is the one the project's
// checkpoints carry (bpe.ChatTemplate).
func TestChatMLTemplateFile(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("testdata", "mempo-chatml.jinja"))
	if err != nil {
		t.Fatal(err)
	}
	if string(src) != bpe.ChatTemplate {
		t.Errorf("testdata/mempo-chatml.jinja differs from bpe.ChatTemplate; write the constant into it and regenerate the goldens")
	}
}

// transformersPython is a Python that imports transformers: MEMPO_TEST_PYTHON, else the
// project's cached environments; "" when there is none.
func transformersPython() string {
	cache := os.Getenv("MEMPO_CACHE")
	if cache == "" {
		home, _ := os.UserHomeDir()
		cache = filepath.Join(home, ".cache", "mempo")
	}
	for _, p := range []string{os.Getenv("MEMPO_TEST_PYTHON"), filepath.Join(cache, "bench-venv", "bin", "python"), filepath.Join(cache, "ecosystem-venv", "bin", "python")} {
		if p != "" && exec.Command(p, "-c", "import transformers").Run() == nil {
			return p
		}
	}
	return ""
}

// TestGoldensAreTransformers reruns testdata/gen_goldens.py with transformers where a
// Python has it and requires the committed goldens: they are transformers' output, not
// a copy of the Go renderer's.
func TestGoldensAreTransformers(t *testing.T) {
	py := transformersPython()
	if py == "" {
		t.Skip("no Python with transformers (MEMPO_TEST_PYTHON, or make bench-compare's environment)")
	}
	target, err := filepath.EvalSymlinks(qwenTokenizer)
	if err != nil {
		t.Fatalf("Qwen3 tokenizer fixture: %v; run build/fixtures.sh", err)
	}
	out := filepath.Join(t.TempDir(), "goldens.json")
	cmd := exec.Command(py, filepath.Join("testdata", "gen_goldens.py"), target, filepath.Join(filepath.Dir(target), bpe.ConfigFile), out)
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("gen_goldens.py: %v\n%s", err, msg)
	}
	var got, want goldenFile
	readJSON(t, out, &got)
	readJSON(t, filepath.Join("testdata", "goldens.json"), &want)
	if diff := cmp.Diff(want.Goldens, got.Goldens); diff != "" {
		t.Errorf("transformers %s renders otherwise than the committed goldens (transformers %s) (-committed +now):\n%s", got.Transformers, want.Transformers, diff)
	}
}

// TestParseConfig: tokenizer_config.json's forms: a template string with special tokens
// as strings or added-token objects, a list of named templates (transformers takes
// "default"), and no template at all.
func TestParseConfig(t *testing.T) {
	msgs := []bpe.Message{{Role: "user", Content: "hi"}}
	tests := []struct {
		name, config, want, err string
	}{
		{"string", `{"chat_template": "{{ bos_token }}{{ messages[0].content }}{{ eos_token }}", "bos_token": "<s>", "eos_token": {"content": "</s>", "lstrip": false}}`, "<s>hi</s>", ""},
		{"named", `{"chat_template": [{"name": "tool_use", "template": "tools"}, {"name": "default", "template": "{{ messages|length }}"}]}`, "1", ""},
		{"named without default", `{"chat_template": [{"name": "rag", "template": "x"}]}`, "", "no chat template"},
		{"missing", `{"eos_token": "</s>"}`, "", "no chat template"},
		{"null", `{"chat_template": null}`, "", "no chat template"},
		{"empty", `{"chat_template": ""}`, "", "no chat template"},
		{"bad type", `{"chat_template": 3}`, "", "want a string or a list"},
		{"does not compile", `{"chat_template": "{% for m in messages %}"}`, "", "chat template"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tmpl, err := ParseConfig([]byte(tt.config))
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want one containing %q", err, tt.err)
				}
				if tt.err == "no chat template" && !errors.Is(err, ErrNoTemplate) {
					t.Errorf("err = %v, want ErrNoTemplate", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got, err := tmpl.Render(msgs, false)
			if err != nil || got != tt.want {
				t.Errorf("Render = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

// TestLoad: a directory without tokenizer_config.json has no template; a template that
// raises (raise_exception) fails its render with the template's message.
func TestLoad(t *testing.T) {
	dir := t.TempDir()
	if _, err := Load(dir); !errors.Is(err, ErrNoTemplate) {
		t.Errorf("Load of a directory without %s: %v, want ErrNoTemplate", bpe.ConfigFile, err)
	}
	cfg := `{"chat_template": "{% if messages[0].role != 'user' %}{{ raise_exception('the first message must be the user\\'s') }}{% endif %}ok"}`
	if err := os.WriteFile(filepath.Join(dir, bpe.ConfigFile), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	tmpl, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := tmpl.Render([]bpe.Message{{Role: "user", Content: "q"}}, true); err != nil || got != "ok" {
		t.Errorf("Render = %q, %v; want ok", got, err)
	}
	if _, err := tmpl.Render([]bpe.Message{{Role: "system", Content: "s"}}, true); err == nil || !strings.Contains(err.Error(), "the first message must be the user's") {
		t.Errorf("Render of a raising template: %v, want its message", err)
	}
}
