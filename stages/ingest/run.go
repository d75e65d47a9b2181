package ingest

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/mempo/mempo/format"
	"github.com/mempo/mempo/jobs"
)

// Stage is the import stage's name in cache keys and manifests.
const Stage = "import"

// DefaultShardRows bounds a prompts shard: 10000 composed prompts are a few MB of
// Parquet, small enough that a reader's row group stays cheap and large enough that
// a typical NQ/HotpotQA training set is a handful of files.
const DefaultShardRows = 10000

// ErrConfig marks an import that cannot start as configured (no input, bad shard size).
var ErrConfig = errors.New("invalid import config")

// RunConfig is the import as a cached stage. Its canonical JSON (the embedded Config
// and ShardRows) is keyed and stored in the manifest with the input files' names
// (keyedConfig); the files' bytes enter the key by digest, so editing a file recomputes
// and renaming one does too, while moving one to another directory does not.
type RunConfig struct {
	Config
	// Inputs are the question files, read in this order: composition groups questions
	// by (data_source, split) in order of first appearance, so the order matters.
	Inputs []string `json:"-"`
	// ShardRows is the most prompts per shard; the plan is the fewest shards that
	// respects it, with prompts spread evenly over them in import order.
	ShardRows int `json:"shard_rows"`
}

// keyedConfig is what the import keys and records as its config: RunConfig and the base
// name of each input file. Inputs are keyed by digest, never by path, but a file's
// name is part of what it means here: its stem is the default data_source and split,
// and its extension picks the reader.
type keyedConfig struct {
	RunConfig
	Files []string `json:"files"`
}

// Run imports cfg.Inputs into a prompts dataset at spec.Out under the stage runtime.
// The caller sets the runtime fields of spec (Out, Seed, Force, Part, progress…); Run
// fills in what the stage decides (name, kind, config, inputs, shard plan). Rows keep
// import order (file order, then Compose's grouping), so a composed prompt's
// objectives sit in one row and row i of a rerun is row i of the first run. Every run
// reads the files, because the shard plan depends on how many prompts they hold; a
// cache hit then writes nothing.
func Run(ctx context.Context, cfg RunConfig, spec jobs.Spec) (*jobs.Result, error) {
	if len(cfg.Inputs) == 0 {
		return nil, fmt.Errorf("import: no question files: pass --input FILE (.parquet or .jsonl), once per file: %w", ErrConfig)
	}
	if cfg.ShardRows < 1 {
		return nil, fmt.Errorf("import: --shard-rows %d: want at least 1: %w", cfg.ShardRows, ErrConfig)
	}
	if cfg.K < 1 {
		return nil, fmt.Errorf("import: --k %d: want at least 1 objective per prompt: %w", cfg.K, ErrConfig)
	}
	// Digest before reading: if a file changes in between, the key names the older
	// bytes and the next run recomputes, never the reverse.
	inputs := make([]format.Input, len(cfg.Inputs))
	keyed := keyedConfig{RunConfig: cfg, Files: make([]string, len(cfg.Inputs))}
	for i, p := range cfg.Inputs {
		in, err := jobs.FileInput(fmt.Sprintf("questions-%d", i), p)
		if err != nil {
			return nil, fmt.Errorf("import: --input %s: %w", p, err)
		}
		inputs[i], keyed.Files[i] = in, filepath.Base(p)
	}
	prompts, rep, err := Import(cfg.Inputs, cfg.Config)
	if err != nil {
		return nil, err
	}
	if len(prompts) == 0 {
		return nil, fmt.Errorf("import %s: %d questions make no prompt of %d objectives (each data_source and split needs at least --k questions): %w",
			strings.Join(cfg.Inputs, ", "), rep.Questions, cfg.K, ErrInput)
	}
	if spec.Log != nil {
		spec.Log.Info("imported", "files", len(cfg.Inputs), "questions", rep.Questions, "prompts", rep.Prompts, "dropped", rep.Dropped)
		if rep.Dropped > 0 {
			spec.Log.Warn("questions left over: a data_source and split held a count not divisible by --k",
				"dropped", rep.Dropped, "k", cfg.K)
		}
	}
	// The optional facts column is written, in every shard, only when some prompt has
	// facts: an import of sources without them keeps its bytes.
	var opts []format.Option
	if slices.ContainsFunc(prompts, func(p format.Prompt) bool { return len(p.Facts) > 0 }) {
		opts = append(opts, format.WithOptional("facts"))
	}
	n := len(prompts)
	shards := (n + cfg.ShardRows - 1) / cfg.ShardRows
	spec.Stage, spec.Kind, spec.SchemaVersion = Stage, format.KindPrompts, format.PromptsVersion
	spec.Config, spec.Inputs, spec.Shards = keyed, inputs, shards
	return jobs.Run(ctx, spec, func(ctx context.Context, w *jobs.Work) error {
		lo, hi := w.Shard*n/shards, (w.Shard+1)*n/shards
		if _, err := format.WriteFile(w.Path, prompts[lo:hi], opts...); err != nil {
			return err
		}
		w.Add(int64(hi-lo), 0)
		return nil
	})
}
