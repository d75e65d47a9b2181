package train

import (
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
	"sort"
	"strings"

	"github.com/mempo/mempo/format"
	"github.com/mempo/mempo/internal/renameio"
	"github.com/mempo/mempo/jobs"
)

// A checkpoint artifact (DESIGN.md §3) is a plain HF directory — config.json,
// generation_config.json, model.safetensors (qwen2.Save) and tokenizer.json, which HF
// transformers loads ignoring the rest — plus optimizer.safetensors (SaveOptimizer),
// trainer_state.json, metrics.jsonl, and the commit record checkpoint.json, written
// last: a directory without a valid commit record is never a checkpoint, whatever it
// holds.
const (
	TokenizerFile    = "tokenizer.json"
	TrainerStateFile = "trainer_state.json"
	MetricsFile      = jobs.MetricsName
	CommitFile       = "checkpoint.json"
	// resumeDir holds the resumable snapshots inside an artifact's temp dir; it is
	// removed before the commit.
	resumeDir = "_resume"
	// commitFormat names the commit record's layout; bump the version when it changes.
	commitFormat  = "mempo.checkpoint"
	commitVersion = 1
)

var (
	// ErrNotCheckpoint marks a directory without a valid commit record.
	ErrNotCheckpoint = errors.New("not a checkpoint")
	// ErrLocked marks an output another live process is writing.
	ErrLocked = errors.New("checkpoint locked by another writer")
)

// Commit is checkpoint.json, the commit record of a checkpoint artifact: what computed
// it (stage, cache key, code, seed, inputs by digest) and every other file with its
// size and sha256. It holds no times or hosts, so the same inputs give the same bytes.
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
	path := filepath.Join(dir, CommitFile)
	b, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%s: no %s (an interrupted or foreign directory): %w", dir, CommitFile, ErrNotCheckpoint)
		}
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	var c Commit
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("read %s: %v: %w", path, err, ErrNotCheckpoint)
	}
	if c.Format != commitFormat || c.Version != commitVersion || len(c.CacheKey) != 64 {
		return nil, fmt.Errorf("read %s: format %q version %d, want %s version %d with a cache key: %w",
			path, c.Format, c.Version, commitFormat, commitVersion, ErrNotCheckpoint)
	}
	for i, f := range c.Files {
		if f.File == "" || strings.Contains(f.File, "..") || len(f.SHA256) != 64 || f.Bytes < 0 {
			return nil, fmt.Errorf("read %s: file %d %q: bad name, sha256 or size: %w", path, i, f.File, ErrNotCheckpoint)
		}
	}
	return &c, nil
}

// check reports how dir differs from its record: a file missing or resized. Sizes
// only, as the stage runtime checks a cache hit; the digests are for auditing.
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

// ReadTrainerState reads dir's trainer_state.json. A plain HF directory has none: the
// error then wraps os.ErrNotExist.
func ReadTrainerState(dir string) (*TrainerState, error) {
	path := filepath.Join(dir, TrainerStateFile)
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read trainer state: %w", err)
	}
	var s TrainerState
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("read %s: %v: %w", path, err, ErrInput)
	}
	if s.Step < 0 || s.Iteration < 0 {
		return nil, fmt.Errorf("read %s: step %d iteration %d, want counts >= 0: %w", path, s.Step, s.Iteration, ErrInput)
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

// CacheKey keys a checkpoint of stage (sft, update) by what it depends on, with the
// labeled lines jobs keys datasets by: stage, code version, schema, the config's
// canonical JSON, each input's digest and the seed.
func CacheKey(stage string, cfg any, inputs []format.Input, seed int64, debug io.Writer) (jobs.Key, error) {
	conf, err := jobs.CanonicalJSON(cfg)
	if err != nil {
		return jobs.Key{}, fmt.Errorf("%s: encode config: %w", stage, err)
	}
	h := jobs.NewHash("stage "+stage, debug)
	h.Line("stage", stage)
	h.Line("code", jobs.CodeVersion())
	h.Line("schema", "checkpoint@1")
	sum := sha256.Sum256(conf)
	h.Line("config", hex.EncodeToString(sum[:]))
	for _, in := range inputs {
		h.Line("input", in.Name, in.Path, in.Digest)
	}
	h.Line("seed", fmt.Sprint(seed))
	return h.Sum(), nil
}

// Hit reports a cache hit of stage at out on w and returns out's trainer state.
func Hit(w io.Writer, stage, out string, key jobs.Key) (*TrainerState, error) {
	st, err := ReadTrainerState(out)
	if err != nil {
		return nil, fmt.Errorf("%s: cache hit %s: %w", stage, out, err)
	}
	fmt.Fprintf(w, "%s: cache hit: %s (key %s, step %d)\n", stage, out, key.Short(), st.Step)
	return st, nil
}

// Artifact is a checkpoint being built: Tmp, a directory beside Out named by the cache
// key, under Out's lock. A run that is killed leaves Tmp with its snapshots, and a rerun
// of the same key continues there; Publish makes Tmp the checkpoint at Out.
type Artifact struct {
	Out, Tmp string
	Key      jobs.Key
	log      *slog.Logger
	release  func()
}

// Begin returns the commit record of Out when it already is the checkpoint of key (a
// cache hit, unless force), else the artifact to build, holding Out's lock; Release it.
func Begin(out string, key jobs.Key, force bool, log *slog.Logger) (*Artifact, *Commit, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if out == "" {
		return nil, nil, fmt.Errorf("no output checkpoint directory (--out): %w", jobs.ErrSpec)
	}
	if c := cached(out, key, log); c != nil && !force {
		return nil, c, nil
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return nil, nil, err
	}
	release, err := lockPath(out + ".lock")
	if err != nil {
		return nil, nil, err
	}
	if c := cached(out, key, log); c != nil && !force {
		release()
		return nil, c, nil // committed by another writer while we waited
	}
	a := &Artifact{Out: out, Tmp: out + ".tmp-" + key.Short(), Key: key, log: log, release: release}
	if err := os.MkdirAll(a.Tmp, 0o755); err != nil {
		release()
		return nil, nil, err
	}
	return a, nil, nil
}

// cached returns out's commit record if it is the complete checkpoint of key; anything
// else is a miss, logged with its reason.
func cached(out string, key jobs.Key, log *slog.Logger) *Commit {
	if _, err := os.Lstat(filepath.Join(out, CommitFile)); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	c, err := ReadCommit(out)
	if err == nil && c.CacheKey != key.String() {
		err = fmt.Errorf("cache key %.12s, want %s", c.CacheKey, key.Short())
	}
	if err == nil {
		err = c.check(out)
	}
	if err != nil {
		log.Info("cache miss", "dir", out, "reason", err)
		return nil
	}
	return c
}

// Release gives up Out's lock; the temp dir stays for a rerun unless published.
func (a *Artifact) Release() {
	if a.release != nil {
		a.release()
		a.release = nil
	}
}

// Publish commits Tmp as the checkpoint at Out: the snapshots are removed, every file
// is hashed into c.Files, checkpoint.json is written last, the tree is fsynced and
// renamed over Out (an old Out is moved aside first and removed after). Steps after
// the rename are logged, not returned.
func (a *Artifact) Publish(c Commit) error {
	if err := os.RemoveAll(filepath.Join(a.Tmp, resumeDir)); err != nil {
		return fmt.Errorf("commit %s: %w", a.Out, err)
	}
	c.Format, c.Version, c.CacheKey = commitFormat, commitVersion, a.Key.String()
	c.Files = nil
	err := filepath.WalkDir(a.Tmp, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(a.Tmp, path)
		// metrics.jsonl holds timings, which differ between identical runs: it is a
		// record of the run, not content, and stays out of the digests (jobs.DirDigest).
		if rel == CommitFile || rel == MetricsFile || strings.HasPrefix(d.Name(), ".") {
			return nil
		}
		if err := renameio.Sync(path); err != nil {
			return err
		}
		sum, n, err := format.Checksum(path)
		if err != nil {
			return err
		}
		c.Files = append(c.Files, FileDigest{File: filepath.ToSlash(rel), SHA256: sum, Bytes: n})
		return nil
	})
	if err != nil {
		return fmt.Errorf("commit %s: %w", a.Out, err)
	}
	sort.Slice(c.Files, func(i, j int) bool { return c.Files[i].File < c.Files[j].File })
	if err := WriteJSON(filepath.Join(a.Tmp, CommitFile), c); err != nil {
		return fmt.Errorf("commit %s: %w", a.Out, err)
	}
	if err := renameio.PublishDir(a.Tmp, a.Out, a.Out+".old-"+a.Key.Short(), a.log); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}
