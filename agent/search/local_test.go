package search

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// syntheticDocs makes n entity pages over a fixed vocabulary, the shape of the
// synthetic task's corpus, deterministically from seed.
func syntheticDocs(n int, seed uint64) []Doc {
	r := rand.New(rand.NewPCG(seed, seed))
	syllables := []string{"var", "nak", "il", "da", "bren", "tes", "sa", "ly", "dre", "mel", "korr", "al", "vane", "os", "ten", "qua"}
	words := []string{"city", "river", "born", "mayor", "founder", "province", "copper", "glass", "amber", "harbour", "village", "capital", "near", "known", "for", "the", "of", "is", "a", "in"}
	name := func() string {
		var b strings.Builder
		for range 2 + r.IntN(2) {
			b.WriteString(syllables[r.IntN(len(syllables))])
		}
		s := b.String()
		return strings.ToUpper(s[:1]) + s[1:]
	}
	docs := make([]Doc, n)
	for i := range docs {
		title := fmt.Sprintf("%s %s", name(), name())
		var text strings.Builder
		text.WriteString(title)
		for range 30 + r.IntN(30) {
			text.WriteByte(' ')
			if r.IntN(4) == 0 {
				text.WriteString(name())
			} else {
				text.WriteString(words[r.IntN(len(words))])
			}
		}
		docs[i] = Doc{ID: fmt.Sprintf("doc-%06d", i), Title: title, Text: text.String()}
	}
	return docs
}

// TestSyntheticTitlesFindTheirPage checks that on a corpus of random, overlapping
// names (many sharing a syllable), asking for a page's full title ranks that page
// in the top 3: the recall the rollout's oracle queries depend on.
func TestSyntheticTitlesFindTheirPage(t *testing.T) {
	docs := syntheticDocs(500, 1)
	l := openIndex(t, buildIndex(t, docs))
	queries := make([]string, len(docs))
	for i, d := range docs {
		queries[i] = d.Title
	}
	got, err := l.Retrieve(context.Background(), queries, 3)
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for i, hits := range got {
		for _, h := range hits {
			if h.ID == docs[i].ID {
				found++
				break
			}
		}
	}
	recall := float64(found) / float64(len(docs))
	t.Logf("recall@3 of %d title queries = %.3f", len(docs), recall)
	if recall < 0.95 {
		t.Errorf("recall@3 of title queries = %.3f, want >= 0.95", recall)
	}
}

// BenchmarkLocalRetrieve measures query throughput of the local index for a
// rollout-sized batch (64 queries, top 3) on a 5000-passage corpus.
func BenchmarkLocalRetrieve(b *testing.B) {
	docs := syntheticDocs(5000, 2)
	l := openIndex(b, buildIndex(b, docs))
	queries := make([]string, 64)
	for i := range queries {
		d := docs[(i*37)%len(docs)]
		queries[i] = d.Title + " founder city"
	}
	ctx := context.Background()
	n := 0
	for b.Loop() {
		if _, err := l.Retrieve(ctx, queries, 3); err != nil {
			b.Fatal(err)
		}
		n += len(queries)
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "queries/s")
}
