// Package ingest turns question files users already have — verl/Search-R1 Parquet and
// JSONL — into prompts rows, optionally composing MEM1-style multi-objective
// questions (DESIGN.md §3). It is pure: files in, rows out; committing a dataset is the
// stage runtime's job.
package ingest

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/mempo/mempo/format"
)

// ErrInput marks a question file that cannot be imported as it is.
var ErrInput = errors.New("bad input")

// Config says how questions are imported.
type Config struct {
	// K is the number of objectives per prompt: K consecutive questions of one
	// data_source and split are joined by "; " with their golds concatenated, as MEM1
	// composes multi-objective tasks (arXiv 2506.15841). 1 keeps questions as they are.
	K int `json:"k"`
	// Split overrides every question's split. Empty: extra_info.split (Parquet) or
	// "split" (JSONL), else the file name without extensions ("test.parquet" → "test").
	Split string `json:"split"`
	// DataSource is the data_source of a question whose file gives none (no
	// data_source column or field, or an empty one). Empty: the file name without
	// extensions. A question's own data_source is kept: Search-R1's training file mixes
	// nq and hotpotqa rows, and relabeling them all would merge their groups in Compose
	// and their per-source scores.
	DataSource string `json:"data_source"`
	// OverrideDataSource, when set, replaces every question's data_source, its own
	// included, e.g. to compose K objectives across sources. It wins over DataSource.
	OverrideDataSource string `json:"override_data_source,omitempty"`
	// DropPrompt leaves out each question's own chat prompt (its system message and the
	// user message wrapping it in the source's instructions), so the protocol's user
	// template renders the question instead; a composed prompt (K > 1) never has one.
	DropPrompt bool `json:"drop_prompt,omitempty"`
}

// Question is one imported question before composition.
type Question struct {
	DataSource string
	Split      string
	Index      int64 // row (Parquet) or question (JSONL) index in its file, from 0
	Text       string
	Golds      []string // accepted aliases
	// System and User are the source's own first messages (a chat prompt's system
	// message and its last user message), empty when it has none or Config.KeepPrompt
	// is off.
	System, User string
	// Facts are the question's supporting facts where the source has them (HotpotQA's
	// supporting_facts, resolved to their sentences), nil otherwise.
	Facts [][]string
}

// Report counts what an import did.
type Report struct {
	Questions int `json:"questions"`
	Prompts   int `json:"prompts"`
	// Dropped questions were left over when a data_source's question count is not
	// a multiple of K.
	Dropped int `json:"dropped"`
}

// Import reads every file (Read) and composes the questions (Compose). Two prompts
// with one uid — the same file given twice — are an error.
func Import(paths []string, cfg Config) ([]format.Prompt, Report, error) {
	var qs []Question
	for _, p := range paths {
		got, err := Read(p, cfg)
		if err != nil {
			return nil, Report{}, err
		}
		qs = append(qs, got...)
	}
	prompts, dropped, err := Compose(qs, cfg.K)
	if err != nil {
		return nil, Report{}, err
	}
	seen := make(map[string]int, len(prompts))
	for i, p := range prompts {
		if j, ok := seen[p.UID]; ok {
			return nil, Report{}, fmt.Errorf("import: prompts %d and %d (%s %s %q) have the same uid %s: is a file listed twice? %w",
				j, i, p.DataSource, p.Split, p.Question, p.UID, ErrInput)
		}
		seen[p.UID] = i
	}
	return prompts, Report{Questions: len(qs), Prompts: len(prompts), Dropped: dropped}, nil
}

// Read reads one question file by its extension: .parquet, or .jsonl/.json (either
// optionally .gz).
func Read(path string, cfg Config) ([]Question, error) {
	name := strings.TrimSuffix(strings.ToLower(path), ".gz")
	switch {
	case strings.HasSuffix(name, ".parquet"):
		return ReadParquet(path, cfg)
	case strings.HasSuffix(name, ".jsonl"), strings.HasSuffix(name, ".json"):
		return ReadJSONL(path, cfg)
	}
	return nil, fmt.Errorf("import %s: unknown file type: want .parquet (verl/Search-R1) or .jsonl: %w", path, ErrInput)
}

// Compose groups questions by (data_source, split), in order of first appearance,
// and joins each run of k consecutive questions of a group into one prompt. Leftover
// questions of a group (fewer than k) are dropped and counted.
func Compose(qs []Question, k int) (prompts []format.Prompt, dropped int, err error) {
	if k < 1 {
		return nil, 0, fmt.Errorf("compose: k = %d: want at least 1: %w", k, ErrInput)
	}
	type group struct{ source, split string }
	var order []group
	byGroup := map[group][]Question{}
	for _, q := range qs {
		g := group{q.DataSource, q.Split}
		if _, ok := byGroup[g]; !ok {
			order = append(order, g)
		}
		byGroup[g] = append(byGroup[g], q)
	}
	for _, g := range order {
		members := byGroup[g]
		n := len(members) / k * k
		dropped += len(members) - n
		for i := 0; i < n; i += k {
			prompts = append(prompts, compose(members[i:i+k]))
		}
	}
	return prompts, dropped, nil
}

func compose(qs []Question) format.Prompt {
	p := format.Prompt{DataSource: qs[0].DataSource, Split: qs[0].Split}
	texts := make([]string, len(qs))
	allFacts := true
	for i, q := range qs {
		texts[i] = q.Text
		p.SourceIndex = append(p.SourceIndex, q.Index)
		p.Golds = append(p.Golds, q.Golds)
		p.Facts = append(p.Facts, q.Facts...)
		allFacts = allFacts && len(q.Facts) > 0
	}
	if !allFacts {
		p.Facts = nil // some objective's facts are unknown: "holds every fact" would lie
	}
	p.Question = strings.Join(texts, "; ")
	p.UID = UID(p.DataSource, p.Split, p.SourceIndex, p.Question)
	if len(qs) == 1 {
		p.System, p.User = qs[0].System, qs[0].User
	}
	return p
}

// UID is a prompt's stable id: the first 16 hex digits of sha256 over its source,
// split, source indices and text. It depends on nothing else, so re-importing the
// same file gives the same uids, and two files that share a name but hold different
// questions do not collide.
func UID(dataSource, split string, index []int64, question string) string {
	h := sha256.New()
	fmt.Fprintf(h, "data_source %s\nsplit %s\n", dataSource, split)
	for _, i := range index {
		fmt.Fprintf(h, "index %d\n", i)
	}
	fmt.Fprintf(h, "question %s\n", question)
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// stem is a file's name without directory and extensions: "data/nq/test.jsonl.gz" →
// "test".
func stem(path string) string {
	base := filepath.Base(path)
	if i := strings.IndexByte(base, '.'); i > 0 {
		return base[:i]
	}
	return base
}

// finish applies cfg's overrides and defaults to q and checks it.
func finish(q *Question, cfg Config, path, where string) error {
	if cfg.OverrideDataSource != "" {
		q.DataSource = cfg.OverrideDataSource
	}
	if q.DataSource == "" {
		q.DataSource = cmp.Or(cfg.DataSource, stem(path))
	}
	if cfg.Split != "" {
		q.Split = cfg.Split
	}
	if q.Split == "" {
		q.Split = stem(path)
	}
	if cfg.DropPrompt || q.User == "" {
		q.System, q.User = "", "" // a system message alone has no question to render
	}
	q.Text = strings.TrimSpace(q.Text)
	if q.Text == "" {
		return fmt.Errorf("import %s: %s: empty question: %w", path, where, ErrInput)
	}
	golds := q.Golds[:0]
	for _, g := range q.Golds {
		if g = strings.TrimSpace(g); g != "" {
			golds = append(golds, g)
		}
	}
	if len(golds) == 0 {
		return fmt.Errorf("import %s: %s: no gold answer: %w", path, where, ErrInput)
	}
	q.Golds = golds
	return nil
}

func rowName(i int64) string { return "row " + strconv.FormatInt(i, 10) }
