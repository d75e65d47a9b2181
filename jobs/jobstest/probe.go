// Package jobstest holds small tensor-free stages that exercise the stage runtime end
// to end: the probe turns questions (from a JSONL file, or generated) into a prompts
// dataset of real Parquet shards, one shard per contiguous group of rows, and the probe
// checkpoint (RunCheckpoint) trains a stand-in model through the checkpoint runtime.
// Tests kill them at chosen points and check that reruns resume to the same digests.
package jobstest

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/mempo/mempo/format"
	"github.com/mempo/mempo/jobs"
)

// DataSource and Split label every row the probe stage writes.
const (
	DataSource = "probe"
	Split      = "train"
)

// ErrConfig marks an invalid Config or input file.
var ErrConfig = errors.New("invalid probe config")

// Config is the probe stage's configuration.
type Config struct {
	// Rows is the number of generated questions; ignored when Input is set.
	Rows int `json:"rows"`
	// Shards is the size of the shard plan: rows are split into this many contiguous groups.
	Shards int `json:"shards"`
	// Width is the tokens per row reported to the progress display and tokens/s. It
	// does not change the output bytes, so it stays out of the JSON, the key and the
	// manifest.
	Width int `json:"-"`
	// Input is a JSONL file of {"question": "..."} objects; empty generates Rows questions.
	// It is keyed by the digest of its bytes (Spec.Inputs), never by its path: a
	// relative path or a moved copy of the same file is the same input. The manifest's
	// inputs still record the path for people to read.
	Input string `json:"-"`
	// Batch is the rows per Writer.Write and progress report. It does not change
	// the output bytes, so it stays out of the JSON, the cache key and the manifest.
	Batch int `json:"-"`
}

// Run computes the probe stage into spec.Out under the stage runtime. The caller
// sets the runtime fields of spec (Out, Seed, Force, Part, progress…); Run fills in
// what the stage decides (name, kind, config, inputs, shard plan).
func Run(ctx context.Context, cfg Config, spec jobs.Spec) (*jobs.Result, error) {
	if cfg.Shards < 1 || cfg.Width < 0 || cfg.Batch < 1 || (cfg.Input == "" && cfg.Rows < 0) {
		return nil, fmt.Errorf("probe: shards %d, width %d, batch %d, rows %d: want shards >= 1, batch >= 1, width and rows >= 0: %w",
			cfg.Shards, cfg.Width, cfg.Batch, cfg.Rows, ErrConfig)
	}
	questions, err := load(cfg)
	if err != nil {
		return nil, err
	}
	if cfg.Input != "" {
		in, err := jobs.FileInput("questions", cfg.Input)
		if err != nil {
			return nil, fmt.Errorf("probe: %w", err)
		}
		spec.Inputs = []format.Input{in}
		cfg.Rows = 0 // not used: keep it out of the key
	}
	spec.Stage, spec.Kind, spec.SchemaVersion = "probe", format.KindPrompts, format.PromptsVersion
	spec.Config, spec.Shards = cfg, cfg.Shards
	seed := spec.Seed
	return jobs.Run(ctx, spec, func(ctx context.Context, w *jobs.Work) error {
		lo, hi := w.Shard*len(questions)/cfg.Shards, (w.Shard+1)*len(questions)/cfg.Shards
		return writeShard(ctx, w, cfg, seed, questions, lo, hi)
	})
}

// load returns the questions: the Input file's, or Rows generated ones.
func load(cfg Config) ([]string, error) {
	if cfg.Input == "" {
		q := make([]string, cfg.Rows)
		for i := range q {
			q[i] = fmt.Sprintf("question %d", i)
		}
		return q, nil
	}
	f, err := os.Open(cfg.Input)
	if err != nil {
		return nil, fmt.Errorf("probe: %w", err)
	}
	defer f.Close()
	var q []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for line := 1; sc.Scan(); line++ {
		var rec struct {
			Question *string `json:"question"`
		}
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil || rec.Question == nil {
			return nil, fmt.Errorf("probe: %s: line %d: want a JSON object with a \"question\" string: %w", cfg.Input, line, ErrConfig)
		}
		q = append(q, *rec.Question)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("probe: %s: %w", cfg.Input, err)
	}
	return q, nil
}

// writeShard writes prompts [lo, hi) as one Parquet shard, Batch rows per Write, and
// reports each batch once it is handed to the writer. The writer holds a row group in
// memory until Close, so a report does not mean the rows are on disk; a run killed
// mid-shard leaves a partial file that jobs removes before the shard is recomputed.
// Each row depends on (seed, index) alone, so its bytes never depend on which shard,
// part or process writes it.
func writeShard(ctx context.Context, w *jobs.Work, cfg Config, seed int64, questions []string, lo, hi int) error {
	sw, err := format.Create[format.Prompt](w.Path)
	if err != nil {
		return err
	}
	batch := make([]format.Prompt, 0, cfg.Batch)
	for i := lo; i < hi; i++ {
		if err := ctx.Err(); err != nil {
			sw.Abort()
			return err
		}
		batch = append(batch, row(seed, i, questions[i]))
		if len(batch) == cfg.Batch || i == hi-1 {
			if err := sw.Write(batch...); err != nil {
				sw.Abort()
				return fmt.Errorf("row %d: %w", i, err)
			}
			w.Add(int64(len(batch)), int64(len(batch)*cfg.Width))
			batch = batch[:0]
		}
	}
	_, err = sw.Close()
	return err
}

// row is question index of the plan as a one-objective prompt. Its uid hashes the seed
// with the index, so two seeds give two different datasets.
func row(seed int64, index int, question string) format.Prompt {
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], uint64(seed))
	binary.LittleEndian.PutUint64(b[8:], uint64(index))
	sum := sha256.Sum256(b[:])
	return format.Prompt{
		UID:         hex.EncodeToString(sum[:8]),
		DataSource:  DataSource,
		Split:       Split,
		SourceIndex: []int64{int64(index)},
		Question:    question,
	}
}
