// Package gentask is the step that writes a task directory (mempo gen-task): the synthetic
// world's corpus, its train and test prompts datasets, and task.json, written last.
package gentask

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/mempo/mempo/agent/task"
	"github.com/mempo/mempo/format"
	"github.com/mempo/mempo/internal/renameio"
	"github.com/mempo/mempo/jobs"
)

// Stage is the task generator's name in cache keys and manifests.
const Stage = "gen-task"

// shardRows bounds a prompts shard, as `mempo import` does by default; the demo's
// sets (2000 train, 200 per test K) are one shard each.
const shardRows = 10000

// setConfig is what a prompts dataset is keyed by: the whole task config (any field
// may change the world its questions come from) and which set it is.
type setConfig struct {
	Task  task.Config `json:"task"`
	Split string      `json:"split"`
	K     int         `json:"k"`
}

// Run generates the task of cfg into the directory spec.Out: corpus.jsonl, prompts-train/,
// prompts-test-k{K}/ per test K, then task.json. Each prompts dataset is committed by
// jobs.Run under a key of the whole config, so a rerun is a cache hit per dataset and
// a changed seed or size recomputes. spec supplies the runtime fields (Force, Verify,
// Log, Stdout, progress); Run sets the rest, and the manifests' seed is cfg.Seed.
//
// task.json is the directory's commit record: a task.json of another config is
// removed before anything else is written, and the new one is written last, so a
// killed run never leaves a task.json that describes files it did not write.
func Run(ctx context.Context, cfg task.Config, spec jobs.Spec) (*task.Summary, error) {
	out := spec.Out
	if out == "" {
		return nil, fmt.Errorf("gen-task: no task directory (--out): %w", jobs.ErrSpec)
	}
	if !spec.Part.Whole() || spec.Merge > 0 {
		return nil, fmt.Errorf("gen-task: --shard and --merge do not apply: a task is small and written whole: %w", jobs.ErrSpec)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	seen := map[int]bool{}
	for _, k := range cfg.TestK {
		if seen[k] {
			return nil, fmt.Errorf("--test-k %v: %d twice; each test K is one dataset: %w", cfg.TestK, k, task.ErrConfig)
		}
		seen[k] = true
	}
	w, err := task.Generate(cfg)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return nil, fmt.Errorf("gen-task: %w", err)
	}
	summaryPath := filepath.Join(out, task.SummaryFile)
	if err := dropStale(summaryPath, cfg); err != nil {
		return nil, err
	}

	s := &task.Summary{Config: cfg, Entities: len(w.Entities)}
	for _, e := range w.Entities {
		if e.Twin >= 0 {
			s.Distractors++
		}
	}
	var corpus bytes.Buffer
	docs := w.Docs()
	if err := task.WriteJSONL(&corpus, docs); err != nil {
		return nil, fmt.Errorf("gen-task: %s: %w", task.CorpusFile, err)
	}
	sum := sha256.Sum256(corpus.Bytes())
	s.Corpus = task.Corpus{File: task.CorpusFile, Docs: len(docs), SHA256: hex.EncodeToString(sum[:])}
	if err := writeIfChanged(filepath.Join(out, task.CorpusFile), corpus.Bytes()); err != nil {
		return nil, fmt.Errorf("gen-task: %w", err)
	}

	type set struct {
		dir     string
		split   string
		k, kmax int
		prompts []task.Prompt
	}
	sets := []set{{task.TrainDir, "train", cfg.TrainK, cfg.TrainKMax, w.Train}}
	for _, k := range cfg.TestK {
		var ps []task.Prompt
		for _, p := range w.Test {
			if p.K == k {
				ps = append(ps, p)
			}
		}
		sets = append(sets, set{task.TestDir(k), "test", k, 0, ps})
	}
	for _, st := range sets {
		res, err := writeSet(ctx, spec, cfg, filepath.Join(out, st.dir), st.split, st.k, st.prompts)
		if err != nil {
			return nil, err
		}
		s.Datasets = append(s.Datasets, task.Dataset{Dir: st.dir, Split: st.split, K: st.k, KMax: st.kmax,
			Rows: res.Manifest.Rows(), Digest: res.Manifest.Digest()})
	}

	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("gen-task: %s: %w", summaryPath, err)
	}
	if err := writeIfChanged(summaryPath, append(b, '\n')); err != nil {
		return nil, fmt.Errorf("gen-task: %w", err)
	}
	return s, nil
}

// writeSet commits one prompts set to dir under the stage runtime.
func writeSet(ctx context.Context, spec jobs.Spec, cfg task.Config, dir, split string, k int, prompts []task.Prompt) (*jobs.Result, error) {
	n := len(prompts)
	spec.Stage, spec.Kind, spec.SchemaVersion = Stage, format.KindPrompts, format.PromptsVersion
	spec.Config = setConfig{Task: cfg, Split: split, K: k}
	spec.Seed = int64(cfg.Seed)
	spec.Inputs = nil
	spec.Out = dir
	spec.Shards = (n + shardRows - 1) / shardRows
	shards := spec.Shards
	return jobs.Run(ctx, spec, func(ctx context.Context, w *jobs.Work) error {
		lo, hi := w.Shard*n/shards, (w.Shard+1)*n/shards
		rows := make([]format.Prompt, 0, hi-lo)
		for i := lo; i < hi; i++ {
			rows = append(rows, PromptRow(prompts[i], i))
		}
		if _, err := format.WriteFile(w.Path, rows, format.WithOptional("facts")); err != nil {
			return err
		}
		w.Add(int64(len(rows)), 0)
		return nil
	})
}

// PromptRow is the prompts row of the i-th prompt of its set. The objectives have no
// source file, so SourceIndex numbers them in the order the set drew them (prompt i's
// objective j is i*K+j): one index per objective, as the contract asks. Facts are every
// hop of every objective as [subject, value]: the statement the oracle's memory writes
// holds both (format.FactHeld).
func PromptRow(p task.Prompt, i int) format.Prompt {
	idx := make([]int64, len(p.Golds))
	for j := range idx {
		idx[j] = int64(i*len(p.Golds) + j)
	}
	var facts [][]string
	for _, h := range p.Facts() {
		facts = append(facts, []string{h.Subject, h.Value})
	}
	return format.Prompt{UID: p.UID, DataSource: p.DataSource, Split: p.Split, SourceIndex: idx,
		Question: p.Question, Golds: p.Golds, Facts: facts}
}

// dropStale removes a task.json that describes another config. A task.json that does
// not parse is removed too: it is rewritten at the end of the run.
func dropStale(path string, cfg task.Config) error {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("gen-task: %w", err)
	}
	var old task.Summary
	if json.Unmarshal(b, &old) == nil {
		have, err1 := jobs.CanonicalJSON(old.Config)
		want, err2 := jobs.CanonicalJSON(cfg)
		if err1 == nil && err2 == nil && bytes.Equal(have, want) {
			return nil
		}
	}
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("gen-task: remove stale %s: %w", path, err)
	}
	return nil
}

// writeIfChanged writes data to path atomically unless path already holds exactly
// data, so an unchanged rerun keeps the file's mtime.
func writeIfChanged(path string, data []byte) error {
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, data) {
		return nil
	}
	return renameio.WriteFile(path, data)
}
