package format

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// A checkpoint (DESIGN.md §3) is a plain HF directory — config.json,
// generation_config.json, model.safetensors and tokenizer.json, which HF transformers
// loads ignoring the rest — plus what the stage that trained it adds (the optimizer
// state in a subdirectory, so that the only top-level .safetensors are weights;
// trainer_state.json, _metrics.jsonl) and the commit record checkpoint.json, written
// last, which names every file by its slash-separated path. This file describes that
// record and reads and verifies it; jobs writes it (every stage that writes a
// checkpoint commits it through jobs.Begin and Artifact.Publish), so a directory
// without a valid commit record is never a checkpoint mempo wrote, whatever it holds.
const (
	// TokenizerFile is the HF tokenizer of a checkpoint (model/bpe saves and loads it).
	TokenizerFile    = "tokenizer.json"
	TrainerStateFile = "trainer_state.json"
	CommitFile       = "checkpoint.json"

	// CommitFormat names the commit record's layout; bump CommitVersion (and
	// jobs.CheckpointSchema, the schema line of checkpoints' cache keys) when it changes.
	CommitFormat  = "mempo.checkpoint"
	CommitVersion = 1
)

// ErrNotCheckpoint marks a directory without a valid commit record, or one whose files
// no longer match it.
var ErrNotCheckpoint = errors.New("not a checkpoint")

// Commit is checkpoint.json, the commit record of a checkpoint: what computed it (stage,
// cache key, code, seed, inputs by digest) and every other file with its size and
// sha256. It holds no times or hosts, so the same inputs give the same bytes, and its
// own sha256 names the checkpoint as an input (jobs.CheckpointInput).
type Commit struct {
	Format      string       `json:"format"`
	Version     int          `json:"version"`
	Stage       string       `json:"stage"`
	CacheKey    string       `json:"cache_key"`
	CodeVersion string       `json:"code_version"`
	Seed        int64        `json:"seed"`
	Inputs      []Input      `json:"inputs"`
	Files       []FileDigest `json:"files"`
}

// FileDigest names one file of a checkpoint by size and sha256.
type FileDigest struct {
	File   string `json:"file"`
	SHA256 string `json:"sha256"`
	Bytes  int64  `json:"bytes"`
}

// ReadCommit reads and validates dir's commit record; it is untrusted input, and any
// failure wraps ErrNotCheckpoint with the path.
func ReadCommit(dir string) (*Commit, error) {
	var c Commit
	path, err := readRecord(dir, CommitFile, " (an interrupted or foreign directory)", &c, ErrNotCheckpoint)
	if err != nil {
		return nil, err
	}
	if c.Format != CommitFormat || c.Version != CommitVersion || len(c.CacheKey) != 64 {
		return nil, fmt.Errorf("read %s: format %q version %d, want %s version %d with a cache key: %w",
			path, c.Format, c.Version, CommitFormat, CommitVersion, ErrNotCheckpoint)
	}
	for i, f := range c.Files {
		if f.File == "" || strings.Contains(f.File, "..") || len(f.SHA256) != 64 || f.Bytes < 0 {
			return nil, fmt.Errorf("read %s: file %d %q: bad name, sha256 or size: %w", path, i, f.File, ErrNotCheckpoint)
		}
	}
	return &c, nil
}

// Digest identifies the checkpoint by content: the sha256 of the record's canonical
// JSON with the inputs' paths left out. The record lists every file's sha256, the
// inputs' digests, the stage, key, code version and seed, so two records have the same
// digest exactly when they describe the same bytes made the same way, wherever their
// inputs were read from; the paths stay in the record for people to read.
func (c *Commit) Digest() string {
	k := *c
	k.Inputs = slices.Clone(c.Inputs)
	for i := range k.Inputs {
		k.Inputs[i].Path = ""
	}
	b, err := json.Marshal(k)
	if err != nil {
		panic(fmt.Sprintf("commit record: %v", err)) // plain strings and numbers
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// OpenCommit returns dir's commit record, or nil when dir has none at all: a checkpoint
// no mempo stage wrote (a Qwen2 directory from the HF hub) has nothing to verify
// against and loads as it is. A record that exists but does not parse is an error
// wrapping ErrNotCheckpoint, as ReadCommit's.
func OpenCommit(dir string) (*Commit, error) {
	if _, err := os.Lstat(filepath.Join(dir, CommitFile)); errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	return ReadCommit(dir)
}

// File returns the record's entry for the file name (slash-separated, relative to the
// checkpoint directory).
func (c *Commit) File(name string) (FileDigest, bool) {
	for _, f := range c.Files {
		if f.File == name {
			return f, true
		}
	}
	return FileDigest{}, false
}

// Tokenizer is the sha256 of the checkpoint's tokenizer.json as recorded, "" when it
// has none. It is part of the checkpoint's identity (the record's digest covers it), so
// two checkpoints with different tokenizers never share a digest, and a tokenizer
// swapped after the commit fails Verify.
func (c *Commit) Tokenizer() string {
	f, _ := c.File(TokenizerFile)
	return f.SHA256
}

// Match compares the sha256 and size that a reader computed over dir/name with the
// record. A file the record does not list, or one whose bytes differ, is an error
// naming the file and both digests, wrapping ErrNotCheckpoint and ErrCorrupt.
func (c *Commit) Match(dir, name, sum string, size int64) error {
	path := filepath.Join(dir, filepath.FromSlash(name))
	f, ok := c.File(name)
	if !ok {
		return fmt.Errorf("%s: not listed in %s (added after the %s stage committed the checkpoint); rerun that stage with --force: %w: %w",
			path, CommitFile, c.Stage, ErrNotCheckpoint, ErrCorrupt)
	}
	if sum != f.SHA256 || size != f.Bytes {
		return fmt.Errorf("%s: sha256 %s (%d bytes), %s records sha256 %s (%d bytes): the file changed after the %s stage committed it; rerun that stage with --force: %w: %w",
			path, sum, size, CommitFile, f.SHA256, f.Bytes, c.Stage, ErrNotCheckpoint, ErrCorrupt)
	}
	return nil
}

// Verify re-hashes the named files of dir, or every recorded file when none are named,
// and compares each with the record (Match), returning every mismatch joined. A named
// file that is neither recorded nor present is skipped, as a checkpoint need not hold
// every optional file; one present but not recorded, or recorded but missing, fails.
func (c *Commit) Verify(dir string, names ...string) error {
	if len(names) == 0 {
		for _, f := range c.Files {
			names = append(names, f.File)
		}
	}
	var errs []error
	for _, name := range names {
		path := filepath.Join(dir, filepath.FromSlash(name))
		_, recorded := c.File(name)
		sum, n, err := Checksum(path)
		switch {
		case errors.Is(err, os.ErrNotExist) && !recorded:
			continue
		case errors.Is(err, os.ErrNotExist):
			errs = append(errs, fmt.Errorf("%s: listed in %s but missing; rerun the %s stage with --force: %w: %w",
				path, CommitFile, c.Stage, ErrNotCheckpoint, ErrCorrupt))
		case err != nil:
			errs = append(errs, fmt.Errorf("verify %s: %w", path, err))
		default:
			if err := c.Match(dir, name, sum, n); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// VerifyCheckpoint verifies the named files of the checkpoint dir against its commit
// record (Commit.Verify); a directory without one has nothing to verify and passes.
func VerifyCheckpoint(dir string, names ...string) error {
	c, err := OpenCommit(dir)
	if err != nil || c == nil {
		return err
	}
	return c.Verify(dir, names...)
}

// TrainerState is trainer_state.json: where training stands after this checkpoint.
type TrainerState struct {
	Stage string `json:"stage"` // "update" or "sft"
	// Step counts optimizer steps over the checkpoint's lineage (AdamW.Steps), the LR
	// schedule's position; Iteration counts the update stages of the lineage.
	Step      int64 `json:"step"`
	Iteration int64 `json:"iteration"`
	Seed      int64 `json:"seed"`
	// RNG is the hex MarshalBinary of the PCG that shuffled the data, after the shuffle.
	RNG    string `json:"rng"`
	Cursor Cursor `json:"cursor"`
	// Config is the stage's resolved config, as keyed.
	Config  json.RawMessage    `json:"config"`
	Metrics map[string]float64 `json:"metrics"`
}

// Cursor is the data position: Done of Total optimizer steps of this stage's plan.
type Cursor struct {
	Epoch int `json:"epoch"`
	Batch int `json:"batch"` // within the epoch, 0-based: the next one to run
	Done  int `json:"done"`
	Total int `json:"total"`
}

// ReadTrainerState reads dir's trainer_state.json. A plain HF directory or an
// init-model checkpoint has none: the error then wraps os.ErrNotExist.
func ReadTrainerState(dir string) (*TrainerState, error) {
	path := filepath.Join(dir, TrainerStateFile)
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read trainer state: %w", err)
	}
	var s TrainerState
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("read %s: %w: %w", path, err, ErrCorrupt)
	}
	if s.Step < 0 || s.Iteration < 0 {
		return nil, fmt.Errorf("read %s: step %d iteration %d, want counts >= 0: %w", path, s.Step, s.Iteration, ErrCorrupt)
	}
	return &s, nil
}
