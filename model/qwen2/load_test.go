package qwen2

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mempo/mempo/model/safetensors"
	"github.com/mempo/mempo/model/torch"
)

// weightBytes copies every weight's bytes to the host, keyed by HF name.
func weightBytes(m *Model) map[string][]byte {
	out := map[string][]byte{}
	for _, w := range m.Weights() {
		var b bytes.Buffer
		if err := torch.Write(&b, w.Tensor); err != nil {
			panic(err)
		}
		out[w.Key] = b.Bytes()
	}
	return out
}

func TestSaveLoadRoundTrip(t *testing.T) {
	tied := testConfig()
	untied := testConfig()
	untied.TieEmbedding = false
	tests := []struct {
		name     string
		cfg      Config
		dtype    string
		maxShard int64
		files    []string
	}{
		{"float32 tied", tied, "float32", 0, []string{ConfigFile, GenerationConfigFile, safetensors.SingleFile}},
		{"bfloat16 untied", untied, "bfloat16", 0, []string{ConfigFile, GenerationConfigFile, safetensors.SingleFile}},
		{"sharded", untied, "float32", 40000, []string{ConfigFile, GenerationConfigFile, safetensors.IndexFile}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := newTestModel(t, tt.cfg, Options{DType: tt.dtype})
			dir := t.TempDir()
			if err := m.Save(dir, tt.maxShard); err != nil {
				t.Fatal(err)
			}
			for _, f := range tt.files {
				if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
					t.Errorf("saved checkpoint lacks %s: %v", f, err)
				}
			}
			got, err := Load(dir, Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer got.Drop()
			if got.DType() != m.DType() {
				t.Errorf("loaded dtype %v, want %v", got.DType(), m.DType())
			}
			want, have := weightBytes(m), weightBytes(got)
			if len(want) != len(have) {
				t.Errorf("loaded %d weights, want %d", len(have), len(want))
			}
			for k, w := range want {
				if !bytes.Equal(have[k], w) {
					t.Errorf("weight %s differs after save/load", k)
				}
			}
		})
	}
}

// TestSavePadToken: config.json and generation_config.json name the pad token — the
// model config's own, else that of the tokenizer set already in the directory — so
// that transformers' generate pads with it instead of warning; without either, the
// key is left out, never null.
func TestSavePadToken(t *testing.T) {
	tokenizerConfig := `{"pad_token": "<|endoftext|>", "added_tokens_decoder": {"90": {"content": "<|endoftext|>"}}}`
	own := 5
	tests := []struct {
		name      string
		pad       *int
		tokenizer string // tokenizer_config.json in dir before Save; "" none
		want      any    // the pad_token_id both files hold; nil: no key
	}{
		{"from the tokenizer", nil, tokenizerConfig, 90.0},
		{"the config's own", &own, tokenizerConfig, 5.0},
		{"no tokenizer", nil, "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := testConfig()
			c.PadTokenID = tt.pad
			m := newTestModel(t, c, Options{})
			dir := t.TempDir()
			if tt.tokenizer != "" {
				if err := os.WriteFile(filepath.Join(dir, tokenizerConfigFile), []byte(tt.tokenizer), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if err := m.Save(dir, 0); err != nil {
				t.Fatal(err)
			}
			for _, name := range []string{ConfigFile, GenerationConfigFile} {
				var got map[string]any
				data, _ := os.ReadFile(filepath.Join(dir, name))
				if err := json.Unmarshal(data, &got); err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				v, ok := got["pad_token_id"]
				if tt.want == nil && ok || tt.want != nil && v != tt.want {
					t.Errorf("%s pad_token_id = %v (present %v), want %v", name, v, ok, tt.want)
				}
			}
			if m.Config.PadTokenID != tt.pad {
				t.Errorf("Save changed the model's PadTokenID to %v, want %v", m.Config.PadTokenID, tt.pad)
			}
		})
	}
	t.Run("unknown pad token", func(t *testing.T) {
		m := newTestModel(t, testConfig(), Options{})
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, tokenizerConfigFile), []byte(`{"pad_token": "<nope>"}`), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := m.Save(dir, 0); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "<nope>") {
			t.Errorf("Save with a pad token the tokenizer lacks = %v, want ErrConfig naming it", err)
		}
	})
}

// TestSavedLayout checks what HF transformers reads: HF key names, F32 dtype, the
// "pt" format tag, no lm_head when tied, and the config fields it dispatches on.
func TestSavedLayout(t *testing.T) {
	m := newTestModel(t, testConfig(), Options{})
	dir := t.TempDir()
	if err := m.Save(dir, 0); err != nil {
		t.Fatal(err)
	}
	f, err := safetensors.Open(filepath.Join(dir, safetensors.SingleFile))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Metadata()["format"] != "pt" {
		t.Errorf("metadata = %v, want format pt", f.Metadata())
	}
	want := map[string][]int64{
		"model.embed_tokens.weight":                      {97, 64},
		"model.layers.0.self_attn.q_proj.weight":         {64, 64},
		"model.layers.0.self_attn.q_proj.bias":           {64},
		"model.layers.1.self_attn.k_proj.weight":         {32, 64},
		"model.layers.1.self_attn.v_proj.bias":           {32},
		"model.layers.1.self_attn.o_proj.weight":         {64, 64},
		"model.layers.0.mlp.gate_proj.weight":            {96, 64},
		"model.layers.0.mlp.down_proj.weight":            {64, 96},
		"model.layers.0.input_layernorm.weight":          {64},
		"model.layers.0.post_attention_layernorm.weight": {64},
		"model.norm.weight":                              {64},
	}
	for k, shape := range want {
		info, ok := f.Info(k)
		if !ok {
			t.Errorf("tensor %s missing", k)
			continue
		}
		if info.DType != safetensors.F32 || len(info.Shape) != len(shape) || info.Shape[0] != shape[0] {
			t.Errorf("tensor %s: %s %v, want F32 %v", k, info.DType, info.Shape, shape)
		}
	}
	if got := len(f.Tensors()); got != 2+2*12 {
		t.Errorf("%d tensors, want %d", got, 2+2*12)
	}
	if _, ok := f.Info("lm_head.weight"); ok {
		t.Error("tied model saved lm_head.weight")
	}
	var cfg map[string]any
	data, _ := os.ReadFile(filepath.Join(dir, ConfigFile))
	json.Unmarshal(data, &cfg)
	for k, v := range map[string]any{"model_type": "qwen2", "torch_dtype": "float32", "hidden_act": "silu"} {
		if cfg[k] != v {
			t.Errorf("config.json %s = %v, want %v", k, cfg[k], v)
		}
	}
}

func TestLoadErrors(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(t *testing.T, dir string)
		want   string
	}{
		{"shape mismatch", func(t *testing.T, dir string) {
			editConfig(t, dir, func(m map[string]any) { m["intermediate_size"] = 128 })
		}, `tensor "model.layers.0.mlp.gate_proj.weight" has shape [96 64], config wants [128 64]`},
		{"extra tensor", func(t *testing.T, dir string) {
			editConfig(t, dir, func(m map[string]any) { m["num_hidden_layers"] = 1 })
		}, `tensor "model.layers.1.input_layernorm.weight" [64] is not part of a 1-layer Qwen2 model`},
		{"missing tensor", func(t *testing.T, dir string) {
			editConfig(t, dir, func(m map[string]any) { m["tie_word_embeddings"] = false })
		}, `tensor "lm_head.weight" [97 64] is missing`},
		{"vocab mismatch", func(t *testing.T, dir string) {
			editConfig(t, dir, func(m map[string]any) { m["vocab_size"] = 100 })
		}, `tensor "model.embed_tokens.weight" has shape [97 64], config wants [100 64]`},
		{"config missing field", func(t *testing.T, dir string) {
			editConfig(t, dir, func(m map[string]any) { delete(m, "rope_theta") })
		}, `field "rope_theta" is missing`},
		{"unknown architecture", func(t *testing.T, dir string) {
			editConfig(t, dir, func(m map[string]any) { m["architectures"] = []string{"Qwen3ForCausalLM"} })
		}, "unknown architecture"},
		{"no weights", func(t *testing.T, dir string) {
			os.Remove(filepath.Join(dir, safetensors.SingleFile))
		}, "neither model.safetensors nor"},
	}
	m := newTestModel(t, testConfig(), Options{})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := m.Save(dir, 0); err != nil {
				t.Fatal(err)
			}
			tt.mutate(t, dir)
			base := liveTensors()
			_, err := Load(dir, Options{})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Load() = %v, want error containing %q", err, tt.want)
			}
			if got := liveTensors(); got != base {
				t.Errorf("failed Load left %d live tensors, want %d", got, base)
			}
		})
	}
}

func editConfig(t *testing.T, dir string, f func(map[string]any)) {
	t.Helper()
	path := filepath.Join(dir, ConfigFile)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	f(m)
	data, _ = json.Marshal(m)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestInitDeterministic(t *testing.T) {
	a := newTestModel(t, testConfig(), Options{})
	b := newTestModel(t, testConfig(), Options{})
	wa, wb := weightBytes(a), weightBytes(b)
	for k := range wa {
		if !bytes.Equal(wa[k], wb[k]) {
			t.Errorf("Init(7) twice: weight %s differs", k)
		}
	}
	if err := b.Init(8); err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(wa["model.embed_tokens.weight"], weightBytes(b)["model.embed_tokens.weight"]) {
		t.Error("Init(7) and Init(8) give the same embedding")
	}
}
