package search_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/mempo/mempo/agent/protocol"
	"github.com/mempo/mempo/agent/search"
	"github.com/mempo/mempo/agent/task"
	"github.com/mempo/mempo/jobs"
	"github.com/mempo/mempo/stages/index"
)

// recorder wraps the task's perfect retriever and keeps, per oracle query, the id of the
// document that holds the fact (the exact retriever's first hit).
type recorder struct {
	exact  *task.Exact
	target map[string]string
}

func (r *recorder) Retrieve(ctx context.Context, queries []string) ([][]protocol.Doc, error) {
	docs, err := r.exact.Retrieve(ctx, queries)
	for i, q := range queries {
		if len(docs[i]) > 0 {
			r.target[q] = docs[i][0].ID
		}
	}
	return docs, err
}

// TestSyntheticRecall checks the task's retrieval bar: BM25 over the synthetic corpus puts the
// document that answers each of the oracle's queries in the top 3 for at least 95% of them.
func TestSyntheticRecall(t *testing.T) {
	w, err := task.Generate(task.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	corpus := filepath.Join(dir, "corpus.jsonl")
	f, err := os.Create(corpus)
	if err != nil {
		t.Fatal(err)
	}
	if err := task.WriteJSONL(f, w.Docs()); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := index.Run(ctx, index.Config{Corpus: corpus}, jobs.Spec{Out: filepath.Join(dir, "index")}); err != nil {
		t.Fatal(err)
	}
	idx, err := search.OpenLocal(filepath.Join(dir, "index"), search.LocalConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer idx.Close()

	rec := &recorder{exact: task.NewExact(w, 3), target: map[string]string{}}
	oracle, err := task.NewOracle(w, protocol.Default(), rec, task.OracleConfig{MaxTurns: 16, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range w.Train[:300] {
		if _, err := oracle.Play(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	queries := make([]string, 0, len(rec.target))
	for q := range rec.target {
		queries = append(queries, q)
	}
	hits, err := idx.Retrieve(ctx, queries, 3)
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for i, q := range queries {
		for _, h := range hits[i] {
			if h.ID == rec.target[q] {
				found++
				break
			}
		}
	}
	recall := float64(found) / float64(len(queries))
	t.Logf("recall@3 = %.3f over %d distinct oracle queries", recall, len(queries))
	if len(queries) < 100 || recall < 0.95 {
		t.Errorf("recall@3 = %.3f over %d queries, want >= 0.95 over >= 100", recall, len(queries))
	}
}
