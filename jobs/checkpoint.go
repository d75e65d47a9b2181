package jobs

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/mempo/mempo/format"
	"github.com/mempo/mempo/internal/renameio"
)

// A checkpoint (DESIGN.md §3) is a plain HF directory — config.json,
// generation_config.json, model.safetensors and tokenizer.json, which HF transformers
// loads ignoring the rest — plus what the stage that trained it adds (optimizer state,
// trainer_state.json, metrics.jsonl) and the commit record checkpoint.json, written
// last. Every stage that writes one (init-model, sft, update) commits it through
// Begin and Artifact.Publish, so a directory without a valid commit record is never a
// checkpoint mempo wrote, whatever it holds.
const (
	TokenizerFile    = "tokenizer.json"
	TrainerStateFile = "trainer_state.json"
	CommitFile       = "checkpoint.json"
	// CheckpointSchema is the schema line of every checkpoint's cache key; its version
	// is commitVersion's.
	CheckpointSchema = "checkpoint@1"

	// commitFormat names the commit record's layout; bump commitVersion (and the schema
	// above) when it changes.
	commitFormat  = "mempo.checkpoint"
	commitVersion = 1
)

// ErrNotCheckpoint marks a directory without a valid commit record, or one whose files
// no longer match it.
var ErrNotCheckpoint = errors.New("not a checkpoint")

// Commit is checkpoint.json, the commit record of a checkpoint: what computed it (stage,
// cache key, code, seed, inputs by digest) and every other file with its size and
// sha256. It holds no times or hosts, so the same inputs give the same bytes, and its
// own sha256 names the checkpoint as an input (CheckpointInput).
type Commit struct {
	Format      string         `json:"format"`
	Version     int            `json:"version"`
	Stage       string         `json:"stage"`
	CacheKey    string         `json:"cache_key"`
	CodeVersion string         `json:"code_version"`
	Seed        int64          `json:"seed"`
	Inputs      []format.Input `json:"inputs"`
	Files       []FileDigest   `json:"files"`
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
	c, _, err := readCommit(dir)
	return c, err
}

// readCommit is ReadCommit that also returns the record's bytes, which CheckpointInput
// hashes.
func readCommit(dir string) (*Commit, []byte, error) {
	path := filepath.Join(dir, CommitFile)
	b, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil, fmt.Errorf("%s: no %s (an interrupted or foreign directory): %w", dir, CommitFile, ErrNotCheckpoint)
		}
		return nil, nil, fmt.Errorf("read %s: %w", path, err)
	}
	var c Commit
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, nil, fmt.Errorf("read %s: %w: %w", path, err, ErrNotCheckpoint)
	}
	if c.Format != commitFormat || c.Version != commitVersion || len(c.CacheKey) != 64 {
		return nil, nil, fmt.Errorf("read %s: format %q version %d, want %s version %d with a cache key: %w",
			path, c.Format, c.Version, commitFormat, commitVersion, ErrNotCheckpoint)
	}
	for i, f := range c.Files {
		if f.File == "" || strings.Contains(f.File, "..") || len(f.SHA256) != 64 || f.Bytes < 0 {
			return nil, nil, fmt.Errorf("read %s: file %d %q: bad name, sha256 or size: %w", path, i, f.File, ErrNotCheckpoint)
		}
	}
	return &c, b, nil
}

// check reports how dir differs from its record: a file missing or resized. Sizes
// only, as the stage runtime checks a cache hit (a stat per file, never a re-hash of
// gigabytes); the digests are for auditing.
func (c *Commit) check(dir string) error {
	for _, f := range c.Files {
		fi, err := os.Stat(filepath.Join(dir, f.File))
		if err != nil {
			return fmt.Errorf("%s: %w", f.File, err)
		}
		if fi.Size() != f.Bytes {
			return fmt.Errorf("%s: %d bytes, record says %d", f.File, fi.Size(), f.Bytes)
		}
	}
	return nil
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
		return nil, fmt.Errorf("read %s: %w: %w", path, err, format.ErrCorrupt)
	}
	if s.Step < 0 || s.Iteration < 0 {
		return nil, fmt.Errorf("read %s: step %d iteration %d, want counts >= 0: %w", path, s.Step, s.Iteration, format.ErrCorrupt)
	}
	return &s, nil
}

// WriteJSON writes v as indented JSON with a trailing newline, atomically.
func WriteJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return renameio.WriteFile(path, append(b, '\n'))
}

// CopyFile copies src to dst atomically (a checkpoint's tokenizer.json from its input).
func CopyFile(dst, src string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return fmt.Errorf("copy %s: %w", src, err)
	}
	return renameio.WriteFile(dst, b)
}
