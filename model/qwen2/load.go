package qwen2

import (
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"unsafe"

	"github.com/mempo/mempo/internal/renameio"
	"github.com/mempo/mempo/model/safetensors"
	"github.com/mempo/mempo/model/torch"
	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/ts"
)

// ErrCheckpoint marks a checkpoint whose tensors do not match its config.
var ErrCheckpoint = errors.New("checkpoint mismatch")

// File names of the HF checkpoint layout besides the weights.
const (
	ConfigFile           = "config.json"
	GenerationConfigFile = "generation_config.json"
)

// Options says where and in which precision to materialise a model.
type Options struct {
	// Device is "cpu" (default), "cuda" or "cuda:N".
	Device string `json:"device"`
	// DType is "float32", "bfloat16" or "float16"; empty keeps config.json's torch_dtype.
	DType string `json:"dtype"`
}

// New allocates a model for cfg with uninitialised weights; call Init or use Load.
func New(cfg Config, opt Options) (m *Model, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	dev, err := torch.Device(cmpOr(opt.Device, "cpu"))
	if err != nil {
		return nil, err
	}
	if opt.DType != "" {
		cfg.TorchDType = opt.DType
	}
	dtype, err := cfg.dtype()
	if err != nil {
		return nil, err
	}
	defer torch.Catch("allocate qwen2 model", &err)
	h, kv := int64(cfg.HiddenSize), int64(cfg.NumKVHeads*cfg.HeadDim())
	alloc := func(shape ...int64) *ts.Tensor { return torch.RawEmpty(shape, dtype, dev).Wrap() }
	lin := func(out, in int64, bias bool) *Linear {
		l := &Linear{Weight: alloc(out, in)}
		if bias {
			l.Bias = alloc(out)
		}
		return l
	}
	norm := func() *RMSNorm { return &RMSNorm{Weight: alloc(h), Eps: cfg.RMSNormEps} }
	m = &Model{Config: cfg, device: dev, dtype: dtype}
	m.Embed = alloc(int64(cfg.VocabSize), h)
	for range cfg.NumLayers {
		m.Layers = append(m.Layers, &DecoderLayer{
			InputNorm: norm(),
			Attn: &Attention{
				Q: lin(h, h, true), K: lin(kv, h, true), V: lin(kv, h, true), O: lin(h, h, false),
				heads: int64(cfg.NumHeads), kvHeads: int64(cfg.NumKVHeads), headDim: int64(cfg.HeadDim()),
			},
			PostNorm: norm(),
			MLP: &MLP{
				Gate: lin(int64(cfg.IntermediateSize), h, false),
				Up:   lin(int64(cfg.IntermediateSize), h, false),
				Down: lin(h, int64(cfg.IntermediateSize), false),
			},
		})
	}
	m.Norm = norm()
	if !cfg.TieEmbedding {
		m.LMHead = lin(int64(cfg.VocabSize), h, false)
	}
	m.rope = newRope(cfg, dtype, dev)
	return m, nil
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// param is one weight with its HF key.
type param struct {
	key string
	t   *ts.Tensor
}

// Weight is a weight tensor with its HF safetensors key.
type Weight struct {
	Key    string
	Tensor *ts.Tensor
}

// Weights lists the model's weights in struct order (a tied head is listed once, as
// the embedding); the optimizer of the update stage iterates these.
func (m *Model) Weights() []Weight {
	var out []Weight
	for _, p := range m.params() {
		out = append(out, Weight{Key: p.key, Tensor: p.t})
	}
	return out
}

// params walks the model's `st` tags in field order and lists every present weight.
func (m *Model) params() []param {
	var out []param
	var walk func(v reflect.Value, prefix string)
	walk = func(v reflect.Value, prefix string) {
		for i := 0; i < v.NumField(); i++ {
			f := v.Type().Field(i)
			tag, ok := f.Tag.Lookup("st")
			if !ok {
				continue
			}
			fv := v.Field(i)
			switch {
			case f.Type == reflect.TypeFor[*ts.Tensor]():
				if !fv.IsNil() {
					out = append(out, param{prefix + tag, fv.Interface().(*ts.Tensor)})
				}
			case f.Type.Kind() == reflect.Pointer:
				if !fv.IsNil() {
					walk(fv.Elem(), prefix+tag+".")
				}
			case f.Type.Kind() == reflect.Slice:
				for j := 0; j < fv.Len(); j++ {
					walk(fv.Index(j).Elem(), prefix+tag+"."+strconv.Itoa(j)+".")
				}
			default:
				panic(fmt.Sprintf("qwen2: field %s: st tag on unsupported type %v", f.Name, f.Type))
			}
		}
	}
	walk(reflect.ValueOf(m).Elem(), "")
	return out
}

// Init fills the weights as HF's Qwen2 _init_weights does: linear and embedding
// weights ~ N(0, initializer_range²), biases 0, norm weights 1. Each tensor draws from
// its own PCG stream keyed by (seed, key), so values do not depend on device, dtype
// or the order tensors are visited.
func (m *Model) Init(seed uint64) (err error) {
	defer torch.Catch("init qwen2 weights", &err)
	std := m.Config.InitializerRange
	if std <= 0 {
		std = 0.02
	}
	for _, p := range m.params() {
		// gotch's generated in-place ops (Fill_, Zero_, Normal_) replace the tensor
		// handle without freeing the old one, so values are staged on the host and
		// copied in with copy_, which does not.
		src := torch.RawEmpty(p.t.MustSize(), gotch.Float, gotch.CPU)
		b := src.Bytes()
		vals := unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/4)
		switch {
		case strings.HasSuffix(p.key, "norm.weight"):
			for i := range vals {
				vals[i] = 1
			}
		case strings.HasSuffix(p.key, ".bias"):
			clear(vals)
		default:
			h := fnv.New64a()
			io.WriteString(h, p.key)
			rng := rand.New(rand.NewPCG(seed, h.Sum64()))
			for i := range vals {
				vals[i] = float32(rng.NormFloat64() * std)
			}
		}
		torch.Of(p.t).CopyFrom(src)
		src.Free()
	}
	return nil
}

// Drop frees every weight of the model.
func (m *Model) Drop() {
	for _, p := range m.params() {
		p.t.MustDrop()
	}
	m.rope.drop()
}

// ignoredKey reports checkpoint keys that carry no weights of their own: rotary
// inv_freq buffers that old exports saved, and a tied head's duplicate.
func (m *Model) ignoredKey(key string) bool {
	return strings.HasSuffix(key, "rotary_emb.inv_freq") || (m.LMHead == nil && key == "lm_head.weight")
}

// Load reads a checkpoint directory in HF layout: config.json and model.safetensors
// or its sharded index. Each tensor is read straight into its destination (through
// one staging tensor only when dtype or device differ), so the weights are never
// held twice. A missing, extra or mis-shaped tensor is an error naming the key, the
// shapes and the file.
func Load(dir string, opt Options) (m *Model, err error) {
	cfg, err := ReadConfig(filepath.Join(dir, ConfigFile))
	if err != nil {
		return nil, err
	}
	set, err := safetensors.OpenDir(dir)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", dir, err)
	}
	defer set.Close()
	if m, err = New(cfg, opt); err != nil {
		return nil, fmt.Errorf("load %s: %w", dir, err)
	}
	if err := m.read(set); err != nil {
		m.Drop()
		return nil, fmt.Errorf("load %s: %w", dir, err)
	}
	return m, nil
}

func (m *Model) read(set *safetensors.Set) (err error) {
	defer torch.Catch("read weights", &err)
	seen := map[string]bool{}
	for _, p := range m.params() {
		info, ok := set.Info(p.key)
		if !ok {
			return fmt.Errorf("tensor %q %v is missing: %w", p.key, p.t.MustSize(), ErrCheckpoint)
		}
		seen[p.key] = true
		want := p.t.MustSize()
		file := set.FileOf(p.key)
		if !slices.Equal(info.Shape, want) {
			return fmt.Errorf("%s: tensor %q has shape %v, config wants %v: %w", file, p.key, info.Shape, want, ErrCheckpoint)
		}
		fdt, ok := torch.FromSafetensors(info.DType)
		if !ok || !weightDType(fdt) {
			return fmt.Errorf("%s: tensor %q has dtype %s, want F32, BF16 or F16: %w", file, p.key, info.DType, ErrCheckpoint)
		}
		if fdt == m.dtype && m.device == gotch.CPU {
			if err := set.ReadInto(p.key, torch.Of(p.t).Bytes()); err != nil {
				return err
			}
			continue
		}
		tmp := torch.RawEmpty(want, fdt, gotch.CPU)
		err := set.ReadInto(p.key, tmp.Bytes())
		if err == nil {
			torch.Of(p.t).CopyFrom(tmp)
		}
		tmp.Free()
		if err != nil {
			return err
		}
	}
	for _, info := range set.Tensors() {
		if !seen[info.Name] && !m.ignoredKey(info.Name) {
			return fmt.Errorf("%s: tensor %q %v is not part of a %d-layer Qwen2 model: %w", set.FileOf(info.Name), info.Name, info.Shape, m.Config.NumLayers, ErrCheckpoint)
		}
	}
	return nil
}

// Save writes the model to dir in HF layout: config.json, generation_config.json and
// model.safetensors, or shards of at most maxShardBytes plus the index when larger
// (maxShardBytes <= 0 never shards). HF transformers loads the result unchanged.
func (m *Model) Save(dir string, maxShardBytes int64) (err error) {
	defer torch.Catch("save qwen2 model to "+dir, &err)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("save qwen2 model: %w", err)
	}
	dt, _ := torch.ToSafetensors(m.dtype) // every weight dtype has one
	var tensors []safetensors.Tensor
	for _, p := range m.params() {
		t := p.t
		tensors = append(tensors, safetensors.Tensor{
			Name: p.key, DType: dt, Shape: t.MustSize(),
			// One tensor at a time goes through host memory.
			WriteData: func(w io.Writer) error { return torch.Write(w, t) },
		})
	}
	if _, err := safetensors.WriteDir(dir, tensors, maxShardBytes); err != nil {
		return fmt.Errorf("save qwen2 model: %w", err)
	}
	cfg := m.Config
	cfg.TorchDType = DTypeName(m.dtype)
	data, err := cfg.Encode()
	if err != nil {
		return err
	}
	if err := renameio.WriteFile(filepath.Join(dir, ConfigFile), data); err != nil {
		return err
	}
	gen, err := encodeJSON(generationConfig{BOSTokenID: cfg.BOSTokenID, EOSTokenID: cfg.EOSTokenID})
	if err != nil {
		return err
	}
	return renameio.WriteFile(filepath.Join(dir, GenerationConfigFile), gen)
}
