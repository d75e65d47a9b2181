// Package initmodel is `mempo init-model`: it trains the embedded default's byte-level
// BPE tokenizer on a task corpus plus the agent protocol's own texts, and writes a
// randomly initialised Qwen2 preset sized to that tokenizer as an HF checkpoint
// directory (DESIGN.md §8): config.json, generation_config.json, model.safetensors,
// tokenizer.json, and init.json, the commit record.
//
// The output is a function of the config, the corpus bytes and the protocol: the same
// inputs give the same bytes, and a rerun finds init.json with the same key and does
// nothing.
package initmodel

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/mempo/mempo/agent/protocol"
	"github.com/mempo/mempo/format"
	"github.com/mempo/mempo/internal/renameio"
	"github.com/mempo/mempo/jobs"
	"github.com/mempo/mempo/model/bpe"
	"github.com/mempo/mempo/model/qwen2"
)

// Stage names init-model in keys and records.
const Stage = "init-model"

// Files of the checkpoint directory besides those qwen2 and bpe name.
const (
	RecordFile    = "init.json"
	TokenizerFile = "tokenizer.json"
	WeightsFile   = "model.safetensors"
)

// recordFormat is the layout version of init.json; bump it when its meaning changes.
const recordFormat = 1

// vocabMultiple pads the embedding rows above the tokenizer's size, as HF checkpoints
// do, so the matrix shapes stay GEMM-friendly.
const vocabMultiple = 64

// ErrInput marks unusable inputs or config: a missing or empty corpus, a bad size.
var ErrInput = errors.New("invalid init-model input")

// Config is the resolved configuration of init-model; its canonical JSON is keyed.
type Config struct {
	// VocabSize bounds the tokenizer: special tokens, 256 byte tokens and the merges.
	VocabSize int `json:"vocab_size"`
	// MinFrequency is the fewest occurrences a pair needs to be merged.
	MinFrequency int `json:"min_frequency"`
	// Preset names the model shape (qwen2.Preset), e.g. "tiny".
	Preset string `json:"preset"`
	// Seed fixes the random weights.
	Seed uint64 `json:"seed"`
}

// DefaultConfig is the demo's: a 4096-token tokenizer and the tiny preset.
func DefaultConfig() Config {
	return Config{VocabSize: 4096, MinFrequency: 2, Preset: "tiny", Seed: 1}
}

// Validate names the first bad field by its flag.
func (c Config) Validate() error {
	if c.VocabSize <= len(bpe.DefaultSpecial())+256 {
		return fmt.Errorf("--vocab %d: want more than the %d special and byte tokens: %w", c.VocabSize, len(bpe.DefaultSpecial())+256, ErrInput)
	}
	if c.MinFrequency < 1 {
		return fmt.Errorf("--min-frequency %d: want >= 1: %w", c.MinFrequency, ErrInput)
	}
	if _, err := qwen2.Preset(c.Preset, 0); err != nil {
		return fmt.Errorf("--preset: %w", err)
	}
	return nil
}

// Inputs are the files init-model reads.
type Inputs struct {
	// Corpus lists Search-R1 JSONL corpora (".gz" is read compressed), in order.
	Corpus []string
	// Prompts lists prompts datasets whose questions the tokenizer also learns; optional.
	Prompts []string
	// Protocol is the agent protocol whose texts the tokenizer learns; nil is the default.
	Protocol *protocol.Protocol
}

// Options are the knobs of one run that do not change its output.
type Options struct {
	Force    bool         // recompute even when Out holds this exact output
	Log      *slog.Logger // cache decisions and post-commit warnings; nil discards
	KeyDebug io.Writer    // receives the key's preimage (MEMPO_DEBUG=keyhash)
}

// Record is init.json: what the checkpoint was made from and the files it holds. It
// carries no times or hosts, so the same inputs give the same bytes.
type Record struct {
	Format      int            `json:"format"`
	Stage       string         `json:"stage"`
	Key         string         `json:"key"`
	CodeVersion string         `json:"code_version"`
	Config      Config         `json:"config"`
	Protocol    string         `json:"protocol"` // the protocol description's name
	Inputs      []format.Input `json:"inputs"`
	// TokenizerVocab is the tokenizer's id count; ModelVocab the embedding rows.
	TokenizerVocab int    `json:"tokenizer_vocab"`
	ModelVocab     int    `json:"model_vocab"`
	Params         int64  `json:"params"`
	Files          []File `json:"files"`
}

// File is one file of the checkpoint by digest.
type File struct {
	Name   string `json:"name"`
	SHA256 string `json:"sha256"`
	Bytes  int64  `json:"bytes"`
}

// Result says what Run did.
type Result struct {
	Dir    string
	Hit    bool // Out already held this exact output
	Record Record
}

// Run makes out hold the checkpoint of cfg and in. It trains the tokenizer and builds
// the model in "<out>.tmp-<pid>" beside out, syncs it and renames it over out, so out
// is never a half-written checkpoint; init.json is written last inside the temp dir.
func Run(ctx context.Context, cfg Config, in Inputs, out string, opts Options) (*Result, error) {
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if out == "" {
		return nil, fmt.Errorf("init-model: no output directory (--out): %w", ErrInput)
	}
	if len(in.Corpus) == 0 {
		return nil, fmt.Errorf("init-model: no --corpus: the tokenizer needs texts: %w", ErrInput)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	p := in.Protocol
	if p == nil {
		p = protocol.Default()
	}
	rec := Record{Format: recordFormat, Stage: Stage, CodeVersion: jobs.CodeVersion(), Config: cfg, Protocol: p.Name}
	for i, path := range in.Corpus {
		input, err := jobs.FileInput("corpus"+strconv.Itoa(i), path)
		if err != nil {
			return nil, fmt.Errorf("init-model: --corpus: %w", err)
		}
		rec.Inputs = append(rec.Inputs, input)
	}
	for i, dir := range in.Prompts {
		input, err := jobs.DatasetInput("prompts"+strconv.Itoa(i), dir)
		if err != nil {
			return nil, fmt.Errorf("init-model: --prompts: %w", err)
		}
		rec.Inputs = append(rec.Inputs, input)
	}
	key, err := runKey(rec, p, opts.KeyDebug)
	if err != nil {
		return nil, err
	}
	rec.Key = key
	if old, reason := cached(out, key); reason == "" && !opts.Force {
		log.Info("cache hit", "dir", out, "key", key[:12])
		return &Result{Dir: out, Hit: true, Record: old}, nil
	} else if reason != "missing" {
		log.Info("cache miss", "dir", out, "reason", reason)
	}

	tmp := out + ".tmp-" + strconv.Itoa(os.Getpid())
	if err := os.RemoveAll(tmp); err != nil {
		return nil, fmt.Errorf("init-model: %w", err)
	}
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return nil, fmt.Errorf("init-model: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			os.RemoveAll(tmp)
		}
	}()
	if err := build(ctx, cfg, in, p, tmp, &rec); err != nil {
		return nil, fmt.Errorf("init-model: %w", err)
	}
	if err := commit(tmp, out, rec, log); err != nil {
		return nil, fmt.Errorf("init-model: %w", err)
	}
	ok = true
	return &Result{Dir: out, Record: rec}, nil
}

// runKey hashes what determines the checkpoint: stage, record format, code, config,
// protocol, corpus bytes and prompts datasets (by digest, not path: moving an input is
// no change).
func runKey(rec Record, p *protocol.Protocol, debug io.Writer) (string, error) {
	h := jobs.NewHash(Stage, debug)
	h.Line("stage", Stage)
	h.Line("format", strconv.Itoa(recordFormat))
	h.Line("code", rec.CodeVersion)
	for _, v := range []struct {
		label string
		v     any
	}{{"config", rec.Config}, {"protocol", p}} {
		b, err := jobs.CanonicalJSON(v.v)
		if err != nil {
			return "", fmt.Errorf("init-model: encode %s: %w", v.label, err)
		}
		sum := sha256.Sum256(b)
		h.Line(v.label, hex.EncodeToString(sum[:]))
	}
	for _, in := range rec.Inputs {
		h.Line("input", in.Name, in.Digest)
	}
	return h.Sum().String(), nil
}

// build trains the tokenizer and writes the model, tokenizer and digests into dir.
func build(ctx context.Context, cfg Config, in Inputs, p *protocol.Protocol, dir string, rec *Record) error {
	var readErr error
	tok, err := bpe.Train(trainingTexts(p, in.Corpus, in.Prompts, &readErr), bpe.TrainConfig{
		VocabSize: cfg.VocabSize, Special: bpe.DefaultSpecial(), MinFrequency: cfg.MinFrequency})
	if readErr != nil {
		return readErr
	}
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := tok.Save(filepath.Join(dir, TokenizerFile)); err != nil {
		return err
	}
	rec.TokenizerVocab = tok.VocabSize()
	rec.ModelVocab = (tok.VocabSize() + vocabMultiple - 1) / vocabMultiple * vocabMultiple
	mc, err := qwen2.Preset(cfg.Preset, rec.ModelVocab)
	if err != nil {
		return err
	}
	eos, ok1 := tok.Special(bpe.ImEnd)
	bos, ok2 := tok.Special(bpe.EndOfText)
	if !ok1 || !ok2 {
		return fmt.Errorf("trained tokenizer lacks %s or %s", bpe.ImEnd, bpe.EndOfText)
	}
	e, b := int(eos), int(bos)
	mc.EOSTokenID, mc.BOSTokenID = &e, &b
	rec.Params = mc.NumParams()
	m, err := qwen2.New(mc, qwen2.Options{Device: "cpu"})
	if err != nil {
		return err
	}
	defer m.Drop()
	if err := m.Init(cfg.Seed); err != nil {
		return err
	}
	if err := m.Save(dir, 0); err != nil {
		return err
	}
	files, err := digestFiles(dir)
	if err != nil {
		return err
	}
	rec.Files = files
	return nil
}

// digestFiles lists the regular files of dir (not dot files) with their digests, by name.
func digestFiles(dir string) ([]File, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var files []File
	for _, e := range entries {
		if !e.Type().IsRegular() || e.Name()[0] == '.' || e.Name() == RecordFile {
			continue
		}
		sum, n, err := format.Checksum(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		files = append(files, File{Name: e.Name(), SHA256: sum, Bytes: n})
	}
	slices.SortFunc(files, func(a, b File) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	return files, nil
}

// cached returns out's record when out is a complete checkpoint of key, else the
// reason it is not ("missing" when there is no record at all). Anything unreadable or
// inconsistent is a miss, never an error: it is rebuilt.
func cached(out string, key string) (Record, string) {
	b, err := os.ReadFile(filepath.Join(out, RecordFile))
	if errors.Is(err, fs.ErrNotExist) {
		return Record{}, "missing"
	}
	if err != nil {
		return Record{}, err.Error()
	}
	var rec Record
	if err := json.Unmarshal(b, &rec); err != nil {
		return Record{}, fmt.Sprintf("%s: %v", RecordFile, err)
	}
	if rec.Format != recordFormat || rec.Key != key {
		return Record{}, "key differs"
	}
	for _, f := range rec.Files {
		fi, err := os.Stat(filepath.Join(out, f.Name))
		if err != nil || fi.Size() != f.Bytes {
			return Record{}, fmt.Sprintf("%s missing or resized", f.Name)
		}
	}
	return rec, ""
}

// commit writes init.json into tmp, syncs the directory tree and renames it over out.
// An existing out is moved aside first and removed after the rename; failing to remove
// it is logged, since the new checkpoint is already in place.
func commit(tmp, out string, rec Record, log *slog.Logger) error {
	b, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return err
	}
	if err := renameio.WriteFile(filepath.Join(tmp, RecordFile), append(b, '\n')); err != nil {
		return err
	}
	entries, err := os.ReadDir(tmp)
	if err != nil {
		return err
	}
	for _, e := range entries {
		path := filepath.Join(tmp, e.Name())
		// Writers that stage through os.CreateTemp leave files 0600; a checkpoint is a
		// shared artifact, readable by the other users of a cluster's file system.
		if err := os.Chmod(path, 0o644); err != nil {
			return err
		}
		if err := renameio.Sync(path); err != nil {
			return err
		}
	}
	if err := renameio.Sync(tmp); err != nil {
		return err
	}
	if err := renameio.PublishDir(tmp, out, out+".old-"+strconv.Itoa(os.Getpid()), log); err != nil {
		return err
	}
	return nil
}
