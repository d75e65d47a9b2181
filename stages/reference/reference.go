// Package reference is a small tensor-free stage that exercises the stage runtime end
// to end: it turns questions (from a JSONL file, or generated from the seed) into rows
// of pseudo-random token ids, one shard per contiguous group of rows. Tests kill it at
// chosen points and check that reruns resume to the same digests.
package reference

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"

	"github.com/mempo/mempo/format"
	"github.com/mempo/mempo/jobs"
)

// Kind is the reference stage's output kind; no other stage reads it.
const Kind format.Kind = "reference"

// SchemaVersion is the version of the row layout below.
const SchemaVersion = 1

// ErrConfig marks an invalid Config or input file.
var ErrConfig = errors.New("invalid reference config")

// Config is the reference stage's configuration.
type Config struct {
	// Rows is the number of generated questions; ignored when Input is set.
	Rows int `json:"rows"`
	// Shards is the size of the shard plan: rows are split into this many contiguous groups.
	Shards int `json:"shards"`
	// Width is the number of token ids per row.
	Width int `json:"width"`
	// Input is a JSONL file of {"question": "..."} objects; empty generates Rows questions.
	Input string `json:"input,omitempty"`
	// Batch is the rows written between flushes and progress reports. It does not
	// change the output bytes, so it stays out of the JSON, the cache key and the manifest.
	Batch int `json:"-"`
}

// Row is one output row, written as one JSON line.
type Row struct {
	UID      string  `json:"uid"`
	Index    int     `json:"index"`
	Question string  `json:"question"`
	Tokens   []int32 `json:"tokens"`
}

// Run computes the reference stage into spec.Out under the stage runtime. The caller
// sets the runtime fields of spec (Out, Seed, Force, Part, progress…); Run fills in
// what the stage decides (name, kind, config, inputs, shard plan).
func Run(ctx context.Context, cfg Config, spec jobs.Spec) (*jobs.Result, error) {
	if cfg.Shards < 1 || cfg.Width < 0 || cfg.Batch < 1 || (cfg.Input == "" && cfg.Rows < 0) {
		return nil, fmt.Errorf("reference: shards %d, width %d, batch %d, rows %d: want shards >= 1, batch >= 1, width and rows >= 0: %w",
			cfg.Shards, cfg.Width, cfg.Batch, cfg.Rows, ErrConfig)
	}
	questions, err := load(cfg)
	if err != nil {
		return nil, err
	}
	if cfg.Input != "" {
		in, err := jobs.FileInput("questions", cfg.Input)
		if err != nil {
			return nil, fmt.Errorf("reference: %w", err)
		}
		spec.Inputs = []format.Input{in}
		cfg.Rows = 0 // not used: keep it out of the key
	}
	spec.Stage, spec.Kind, spec.SchemaVersion = "reference", Kind, SchemaVersion
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
		return nil, fmt.Errorf("reference: %w", err)
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
			return nil, fmt.Errorf("reference: %s: line %d: want a JSON object with a \"question\" string: %w", cfg.Input, line, ErrConfig)
		}
		q = append(q, *rec.Question)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reference: %s: %w", cfg.Input, err)
	}
	return q, nil
}

// writeShard writes rows [lo, hi) as JSON lines. Each row's tokens come from a PRNG
// seeded by (seed, row index) alone, so a row's bytes never depend on which shard,
// part or process writes it.
//
// TODO(#3): write Parquet through format's shard writer once it lands; the runtime is
// agnostic to the bytes, so only this function changes.
func writeShard(ctx context.Context, w *jobs.Work, cfg Config, seed int64, questions []string, lo, hi int) error {
	f, err := os.Create(w.Path)
	if err != nil {
		return err
	}
	bw := bufio.NewWriter(f)
	enc := json.NewEncoder(bw)
	var pending int64
	for i := lo; i < hi; i++ {
		if err := ctx.Err(); err != nil {
			f.Close()
			return err
		}
		if err := enc.Encode(row(seed, i, questions[i], cfg.Width)); err != nil {
			f.Close()
			return fmt.Errorf("row %d: %w", i, err)
		}
		if pending++; pending == int64(cfg.Batch) || i == hi-1 {
			// Flush before reporting, so a report means the rows are in the file.
			if err := bw.Flush(); err != nil {
				f.Close()
				return fmt.Errorf("row %d: %w", i, err)
			}
			w.Add(pending, pending*int64(cfg.Width))
			pending = 0
		}
	}
	if err := bw.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func row(seed int64, index int, question string, width int) Row {
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], uint64(seed))
	binary.LittleEndian.PutUint64(b[8:], uint64(index))
	sum := sha256.Sum256(b[:])
	rng := rand.New(rand.NewPCG(binary.LittleEndian.Uint64(sum[:8]), binary.LittleEndian.Uint64(sum[8:16])))
	tokens := make([]int32, width)
	for j := range tokens {
		tokens[j] = rng.Int32N(151936) // Qwen2's vocabulary size
	}
	return Row{UID: hex.EncodeToString(sum[:8]), Index: index, Question: question, Tokens: tokens}
}
