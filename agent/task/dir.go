package task

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// A task directory, as mempo gen-task writes it: the corpus, a prompts dataset per set,
// and task.json, the commit record that lets any stage regenerate the world.

// Files and directories of a task directory.
const (
	CorpusFile  = "corpus.jsonl" // Search-R1 corpus, one {"id","contents"} per line
	SummaryFile = "task.json"    // the resolved config and what was written; written last
	TrainDir    = "prompts-train"
)

// TestDir is the prompts dataset directory of the test set with k objectives.
func TestDir(k int) string { return fmt.Sprintf("prompts-test-k%d", k) }

// Summary is a task directory's task.json: the resolved config, the corpus and each
// prompts dataset by digest. It holds no times or hosts, so the same config gives the
// same bytes, and a rerun that changes nothing leaves the file untouched (its mtime is
// what a Makefile target sees).
type Summary struct {
	Config      Config    `json:"config"`
	Entities    int       `json:"entities"`    // documents, distractors included
	Distractors int       `json:"distractors"` // near-duplicate entities
	Corpus      Corpus    `json:"corpus"`
	Datasets    []Dataset `json:"datasets"` // train first, then the test sets in TestK order
}

// Corpus describes corpus.jsonl.
type Corpus struct {
	File   string `json:"file"`
	Docs   int    `json:"docs"`
	SHA256 string `json:"sha256"`
}

// Dataset describes one prompts dataset of the task directory.
type Dataset struct {
	Dir    string `json:"dir"` // relative to the task directory
	Split  string `json:"split"`
	K      int    `json:"k"`
	KMax   int    `json:"k_max,omitempty"` // a training mix: each question has K..KMax objectives
	Rows   int64  `json:"rows"`
	Digest string `json:"digest"` // the dataset digest (format.Manifest.Digest)
}

// Load regenerates the world of the task directory dir from its task.json, for the
// stages that need more than the prompts datasets hold: the oracle (SFT) and the facts
// behind each question (evaluation of forgetting).
func Load(dir string) (*World, *Summary, error) {
	path := filepath.Join(dir, SummaryFile)
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("task %s: %w (generate it with mempo gen-task)", dir, err)
	}
	var s Summary
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, nil, fmt.Errorf("task %s: %w: %w", path, err, ErrConfig)
	}
	w, err := Generate(s.Config)
	if err != nil {
		return nil, nil, fmt.Errorf("task %s: %w", path, err)
	}
	return w, &s, nil
}
