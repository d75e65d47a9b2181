package qwen2

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"unsafe"

	"github.com/mempo/mempo/format"
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
	// Attention is how passes of more than one new token attend (see Attentions):
	// "auto" (the default, also for empty), "eager" or "sdpa".
	Attention string `json:"attention,omitempty"`
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
	fuseFrom, err := attentionFuseFrom(opt.Attention)
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
	m = &Model{Config: cfg, device: dev, dtype: dtype, fuseFrom: fuseFrom}
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
//
// A checkpoint with a commit record (format.CommitFile) is verified against it: the
// small files a stage reads beside the weights (config.json, generation_config.json,
// tokenizer.json, the shard index) are hashed first, and every weights file is hashed
// as it is read, in one sequential pass, so a flipped bit anywhere fails the load with
// an error naming the file and both digests. A directory without a record (an HF hub
// download) has nothing to verify against and loads as it is.
//
// Cost, measured with BenchmarkLoadVerify (a 343 MB float32 model read from the page
// cache) on this project's 2-core AMD EPYC with SHA instructions, alternating runs:
// sha256 alone runs at 1.2–1.3 GB/s and an unverified load at 1.7–2.0 GB/s. Hashed in
// line with the reads, a verified load ran at 0.81–0.85 GB/s; hashed in a goroutine
// beside them (readFile), at 1.04–1.24 GB/s, about the hash's own rate. It reads each
// file once, in order, instead of by ReadAt per tensor.
func Load(dir string, opt Options) (m *Model, err error) {
	rec, err := format.OpenCommit(dir)
	if err == nil && rec != nil {
		err = rec.Verify(dir, ConfigFile, GenerationConfigFile, format.TokenizerFile, safetensors.IndexFile)
	}
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", dir, err)
	}
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
	if err := m.read(set, dir, rec); err != nil {
		m.Drop()
		return nil, fmt.Errorf("load %s: %w", dir, err)
	}
	return m, nil
}

// placed is one weight with its location in the checkpoint.
type placed struct {
	param
	info safetensors.Info
}

// read fills the weights from set, each file read once from start to end. With a
// commit record, each file's sha256 over that pass must match it.
func (m *Model) read(set *safetensors.Set, dir string, rec *format.Commit) (err error) {
	defer torch.Catch("read weights", &err)
	seen := map[string]bool{}
	byFile := map[string][]placed{}
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
		byFile[file] = append(byFile[file], placed{p, info})
	}
	for _, info := range set.Tensors() {
		if !seen[info.Name] && !m.ignoredKey(info.Name) {
			return fmt.Errorf("%s: tensor %q %v is not part of a %d-layer Qwen2 model: %w", set.FileOf(info.Name), info.Name, info.Shape, m.Config.NumLayers, ErrCheckpoint)
		}
	}
	files := slices.Sorted(maps.Keys(byFile))
	for _, info := range set.Tensors() {
		// A file holding only ignored tensors is still part of what the record vouches for.
		if f := set.FileOf(info.Name); !slices.Contains(files, f) {
			files = append(files, f)
			byFile[f] = nil
		}
	}
	for _, file := range files {
		if err := m.readFile(file, byFile[file], dir, rec); err != nil {
			return err
		}
	}
	return nil
}

// readFile reads the weights ws of one safetensors file in offset order, passing every
// byte of the file (header and gaps included) through sha256 when rec is set. The
// hash runs beside the reads (hashPipe), on bytes already in place: a verified load
// costs about what the slower of the two does alone.
func (m *Model) readFile(path string, ws []placed, dir string, rec *format.Commit) (err error) {
	slices.SortFunc(ws, func(a, b placed) int { return cmp.Compare(a.info.Offset, b.info.Offset) })
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	defer f.Close()
	var sum *hashPipe
	if rec != nil {
		sum = newHashPipe()
		// The pipe reads the weights' memory: it must be done before a caller drops them.
		defer func() {
			if digest := sum.close(); err == nil {
				err = matchFile(rec, dir, path, digest, sum.n)
			}
		}()
	}
	var pos int64
	for _, w := range ws {
		if w.info.Offset < pos {
			return fmt.Errorf("%s: tensor %q at offset %d overlaps the previous one, which ends at %d: %w", path, w.key, w.info.Offset, pos, ErrCheckpoint)
		}
		if err := skip(f, w.info.Offset-pos, sum); err != nil {
			return fmt.Errorf("read %s: before %q: %w", path, w.key, err)
		}
		fdt, _ := torch.FromSafetensors(w.info.DType) // checked by read
		var err error
		if fdt == m.dtype && m.device == gotch.CPU {
			err = readInto(f, torch.Of(w.t).Bytes(), sum)
		} else {
			tmp := torch.RawEmpty(w.t.MustSize(), fdt, gotch.CPU)
			if err = readInto(f, tmp.Bytes(), sum); err == nil {
				torch.Of(w.t).CopyFrom(tmp)
			}
			sum.wait() // the hash reads tmp
			tmp.Free()
		}
		if err != nil {
			return fmt.Errorf("read %s: %q at offset %d: %w", path, w.key, w.info.Offset, err)
		}
		pos = w.info.Offset + w.info.Size
	}
	if sum == nil {
		return nil
	}
	if err := skip(f, -1, sum); err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	return nil
}

// matchFile checks a weights file's digest and size against the commit record.
func matchFile(rec *format.Commit, dir, path, digest string, size int64) error {
	rel, err := filepath.Rel(dir, path)
	if err != nil {
		rel = filepath.Base(path)
	}
	return rec.Match(dir, filepath.ToSlash(rel), digest, size)
}

// readChunk is how many bytes readInto reads before handing them to the hash, so the
// hash of one large tensor overlaps its own read.
const readChunk = 16 << 20

// readInto fills dst from r, handing each chunk to sum (when set) as it lands.
func readInto(r io.Reader, dst []byte, sum *hashPipe) error {
	for len(dst) > 0 {
		n := min(len(dst), readChunk)
		if _, err := io.ReadFull(r, dst[:n]); err != nil {
			return err
		}
		sum.write(dst[:n])
		dst = dst[n:]
	}
	return nil
}

// skip reads n bytes of r that hold no weight (a header, a gap) into sum (when set);
// with sum, n < 0 reads all that is left.
func skip(r io.Reader, n int64, sum *hashPipe) error {
	if sum == nil {
		_, err := io.CopyN(io.Discard, r, n)
		return err
	}
	for n != 0 {
		size := int64(readChunk)
		if n > 0 {
			size = min(n, size)
		}
		buf := make([]byte, size) // the hash may still hold the last one
		k, err := io.ReadFull(r, buf)
		sum.write(buf[:k])
		if n > 0 {
			n -= int64(k)
		}
		switch {
		case n < 0 && (err == io.EOF || err == io.ErrUnexpectedEOF):
			return nil
		case err != nil:
			return err
		}
	}
	return nil
}

// hashPipe computes a sha256 in a goroutine of its own over the byte slices written
// to it, in order. A written slice must stay unchanged and alive until wait or close
// returns.
type hashPipe struct {
	chunks chan []byte
	idle   chan struct{} // receives when the goroutine has hashed every chunk so far
	done   chan string
	n      int64
}

func newHashPipe() *hashPipe {
	p := &hashPipe{chunks: make(chan []byte, 4), idle: make(chan struct{}), done: make(chan string)}
	go func() {
		h := sha256.New()
		for b := range p.chunks {
			if b == nil {
				p.idle <- struct{}{}
				continue
			}
			h.Write(b)
		}
		p.done <- hex.EncodeToString(h.Sum(nil))
	}()
	return p
}

// write hands b to the hash; a nil p ignores it.
func (p *hashPipe) write(b []byte) {
	if p != nil && len(b) > 0 {
		p.chunks <- b
		p.n += int64(len(b))
	}
}

// wait returns when every slice written so far is hashed; a nil p returns at once.
func (p *hashPipe) wait() {
	if p != nil {
		p.chunks <- nil
		<-p.idle
	}
}

// close waits for the hash and returns it as hex.
func (p *hashPipe) close() string {
	close(p.chunks)
	return <-p.done
}

// Vocab is what CheckTokenizer reads of a tokenizer; bpe.Tokenizer has it.
type Vocab interface {
	VocabSize() int
	TokenString(id int32) (string, bool)
	Special(content string) (int32, bool)
}

// CheckTokenizer verifies that tok is a tokenizer of a model with config c, beyond
// CheckVocab's bound: the ids config.json names as eos_token_id and bos_token_id must
// be special tokens of tok, and each token in required (the special tokens the
// prompt format renders, e.g. ChatML's) must be a special token of tok with an
// embedding row. A tokenizer with the model's vocabulary size but shuffled ids, or
// one that lost its last tokens, fails here by name, where CheckVocab alone passes.
func (c Config) CheckTokenizer(tok Vocab, required ...string) error {
	if err := c.CheckVocab(tok.VocabSize()); err != nil {
		return err
	}
	for _, f := range []struct {
		field string
		id    *int
	}{{"eos_token_id", c.EOSTokenID}, {"bos_token_id", c.BOSTokenID}} {
		if f.id == nil {
			continue
		}
		s, ok := tok.TokenString(int32(*f.id))
		if !ok {
			return fmt.Errorf("config.json %s %d: no such token in a tokenizer of %d tokens: tokenizer/model mismatch: %w",
				f.field, *f.id, tok.VocabSize(), ErrConfig)
		}
		if _, special := tok.Special(s); !special {
			return fmt.Errorf("config.json %s %d: the tokenizer's token %d is %q, not a special token: tokenizer/model mismatch: %w",
				f.field, *f.id, *f.id, s, ErrConfig)
		}
	}
	for _, s := range required {
		id, ok := tok.Special(s)
		if !ok {
			return fmt.Errorf("tokenizer has no special token %q, which the prompt format needs: tokenizer/model mismatch: %w", s, ErrConfig)
		}
		if int(id) >= c.VocabSize {
			return fmt.Errorf("special token %q has id %d, model vocab_size is %d: tokenizer/model mismatch: %w", s, id, c.VocabSize, ErrConfig)
		}
	}
	return nil
}

// Save writes the model to dir in HF layout: config.json, generation_config.json and
// model.safetensors, or shards of at most maxShardBytes plus the index when larger
// (maxShardBytes <= 0 never shards). HF transformers loads the result unchanged. Both
// configs name the pad token: Config's, else the one of the tokenizer set already in
// dir (TokenizerPad), so a caller writes the tokenizer first.
func (m *Model) Save(dir string, maxShardBytes int64) (err error) {
	defer torch.Catch("save qwen2 model to "+dir, &err)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("save qwen2 model: %w", err)
	}
	cfg := m.Config
	cfg.TorchDType = DTypeName(m.dtype)
	if cfg.PadTokenID == nil {
		if cfg.PadTokenID, err = TokenizerPad(dir, cfg.VocabSize); err != nil {
			return fmt.Errorf("save qwen2 model to %s: %w", dir, err)
		}
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
	data, err := cfg.Encode()
	if err != nil {
		return err
	}
	if err := renameio.WriteFile(filepath.Join(dir, ConfigFile), data); err != nil {
		return err
	}
	gen, err := encodeJSON(generationConfig{BOSTokenID: cfg.BOSTokenID, EOSTokenID: cfg.EOSTokenID, PadTokenID: cfg.PadTokenID})
	if err != nil {
		return err
	}
	return renameio.WriteFile(filepath.Join(dir, GenerationConfigFile), gen)
}
