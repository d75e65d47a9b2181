package search

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// world is a small hand-made corpus in the shape of the synthetic task: entity
// pages whose facts mention other entities, so the right page must beat pages that
// merely mention the same names.
var world = []Doc{
	{ID: "d1", Title: "Varnak", Text: "Varnak is a city on the river Oss. The mayor of Varnak is Ilda Brenn."},
	{ID: "d2", Title: "Ilda Brenn", Text: "Ilda Brenn was born in Tessaly. She is the mayor of Varnak."},
	{ID: "d3", Title: "Tessaly", Text: "Tessaly is a province known for its copper mines."},
	{ID: "d4", Title: "Oss", Text: "The Oss is a river that flows through Varnak and Dremmel."},
	{ID: "d5", Title: "Dremmel", Text: "Dremmel is a town whose founder was Korr Alvane."},
	{ID: "d6", Title: "Korr Alvane", Text: "Korr Alvane founded Dremmel. His birthplace is Tessaly."},
	{ID: "d7", Title: "Dune", Text: "Dune is a village famous for glass."},
	{ID: "d8", Title: "Dunes", Text: "Dunes is a harbour where amber is traded by boat."},
}

// corpusJSONL renders docs as a Search-R1 corpus.
func corpusJSONL(t testing.TB, docs []Doc) string {
	t.Helper()
	var b strings.Builder
	for _, d := range docs {
		line, err := json.Marshal(map[string]string{"id": d.ID, "contents": JoinContents(d.Title, d.Text)})
		if err != nil {
			t.Fatal(err)
		}
		b.Write(line)
		b.WriteByte('\n')
	}
	return b.String()
}

// buildIndex writes docs as a corpus and indexes it into a fresh directory.
func buildIndex(t testing.TB, docs []Doc) string {
	t.Helper()
	root := t.TempDir()
	corpus := filepath.Join(root, "corpus.jsonl")
	if err := os.WriteFile(corpus, []byte(corpusJSONL(t, docs)), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "index")
	if _, _, err := Build(context.Background(), IndexConfig{Corpus: corpus, Dir: dir}, BuildOptions{}); err != nil {
		t.Fatal(err)
	}
	return dir
}

func openIndex(t testing.TB, dir string) *Local {
	t.Helper()
	l, err := OpenLocal(dir, LocalConfig{Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Error(err)
		}
	})
	return l
}

func ids(hits []Hit) []string {
	out := make([]string, len(hits))
	for i, h := range hits {
		out[i] = h.ID
	}
	return out
}

func TestBM25RanksTheAnswerFirst(t *testing.T) {
	l := openIndex(t, buildIndex(t, world))
	tests := []struct {
		query string
		want  string
	}{
		{"Where was Ilda Brenn born?", "d2"},
		{"founder of Dremmel", "d5"},
		{"province known for copper mines", "d3"},
		{"Alvane's", "d6"},                          // possessive removed
		{"KORR ALVANE BIRTHPLACE", "d6"},            // case folded
		{"Dunes", "d8"},                             // no stemming: Dunes is not Dune
		{"Dune", "d7"},                              // and Dune is not Dunes
		{"which river flows through Dremmel", "d4"}, // stop words do not dilute the match
		{"the mayor of the city on the river Oss", "d1"},
	}
	queries := make([]string, len(tests))
	for i, tt := range tests {
		queries[i] = tt.query
	}
	got, err := l.Retrieve(context.Background(), queries, 3)
	if err != nil {
		t.Fatal(err)
	}
	for i, tt := range tests {
		if len(got[i]) == 0 || got[i][0].ID != tt.want {
			t.Errorf("Retrieve(%q) = %v, want %s first", tt.query, ids(got[i]), tt.want)
		}
	}
}

func TestRetrieveHitFields(t *testing.T) {
	l := openIndex(t, buildIndex(t, world))
	got, err := l.Retrieve(context.Background(), []string{"copper mines", "zzz nothing matches", "the of a"}, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Fatalf("Retrieve returned %d lists, want 3", len(got))
	}
	if len(got[0]) != 1 {
		t.Fatalf("Retrieve(copper mines) = %v, want only d3", ids(got[0]))
	}
	h := got[0][0]
	want := Hit{ID: "d3", Title: "Tessaly", Text: world[2].Text, Contents: JoinContents("Tessaly", world[2].Text), Score: h.Score}
	if diff := cmp.Diff(want, h); diff != "" {
		t.Errorf("hit (-want +got):\n%s", diff)
	}
	if h.Score <= 0 {
		t.Errorf("score = %v, want > 0", h.Score)
	}
	for i := 1; i < 3; i++ {
		if got[i] == nil || len(got[i]) != 0 {
			t.Errorf("Retrieve(%q) = %#v, want an empty, non-nil list", []string{"", "zzz nothing matches", "the of a"}[i], got[i])
		}
	}
	if _, err := l.Retrieve(context.Background(), []string{"x"}, 0); !errors.Is(err, ErrBadRequest) {
		t.Errorf("Retrieve(topk 0) error = %v, want ErrBadRequest", err)
	}
}

func TestRetrieveDeterministic(t *testing.T) {
	// Identical passages score the same; the order must then be by id, in every build.
	docs := append([]Doc{
		{ID: "t2", Title: "Twin", Text: "Quill lake twin."},
		{ID: "t1", Title: "Twin", Text: "Quill lake twin."},
		{ID: "t3", Title: "Twin", Text: "Quill lake twin."},
	}, world...)
	queries := []string{"quill lake", "Varnak mayor", "Tessaly", "river", "born"}
	var runs [][][]Hit
	for range 2 {
		l := openIndex(t, buildIndex(t, docs))
		for _, workers := range []int{1, 4} {
			l.workers = workers
			got, err := l.Retrieve(context.Background(), queries, 3)
			if err != nil {
				t.Fatal(err)
			}
			runs = append(runs, got)
		}
	}
	if got, want := ids(runs[0][0]), []string{"t1", "t2", "t3"}; !cmp.Equal(got, want) {
		t.Errorf("tied hits = %v, want %v (ascending id)", got, want)
	}
	for i := 1; i < len(runs); i++ {
		if diff := cmp.Diff(runs[0], runs[i]); diff != "" {
			t.Errorf("run %d differs from run 0 (-want +got):\n%s", i, diff)
		}
	}
}

func TestBuildCache(t *testing.T) {
	root := t.TempDir()
	corpus := filepath.Join(root, "corpus.jsonl")
	dir := filepath.Join(root, "index")
	cfg := IndexConfig{Corpus: corpus, Dir: dir}
	write := func(docs []Doc) {
		if err := os.WriteFile(corpus, []byte(corpusJSONL(t, docs)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	build := func(opts BuildOptions) (Meta, bool) {
		t.Helper()
		m, cached, err := Build(context.Background(), cfg, opts)
		if err != nil {
			t.Fatal(err)
		}
		return m, cached
	}

	write(world)
	first, cached := build(BuildOptions{})
	if cached || first.Docs != int64(len(world)) {
		t.Fatalf("first Build = docs %d, cached %v; want %d, false", first.Docs, cached, len(world))
	}
	again, cached := build(BuildOptions{})
	if !cached || again.Created != first.Created {
		t.Errorf("second Build: cached %v, created %v; want true, %v (the same index)", cached, again.Created, first.Created)
	}
	forced, cached := build(BuildOptions{Force: true})
	if cached || forced.Key != first.Key {
		t.Errorf("forced Build: cached %v, key %s; want false, %s", cached, forced.Key, first.Key)
	}

	write(world[:3])
	changed, cached := build(BuildOptions{})
	if cached || changed.Docs != 3 || changed.Key == first.Key {
		t.Errorf("Build after corpus change: cached %v, docs %d, key changed %v; want false, 3, true",
			cached, changed.Docs, changed.Key != first.Key)
	}
	got, err := openIndex(t, dir).Retrieve(context.Background(), []string{"Dremmel founder"}, 3)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range got[0] {
		if h.ID == "d5" {
			t.Errorf("rebuilt index still returns %s, which the new corpus no longer holds", h.ID)
		}
	}
	assertNoScratch(t, dir)
}

// assertNoScratch checks that no build scratch directory is left beside dir.
func assertNoScratch(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(filepath.Dir(dir))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.Contains(e.Name(), tmpInfix) || strings.Contains(e.Name(), oldInfix) {
			t.Errorf("scratch directory %s left beside %s", e.Name(), dir)
		}
	}
}

func TestFailedBuildLeavesNoIndex(t *testing.T) {
	bad := corpusJSONL(t, world[:2]) + "{not json\n" + corpusJSONL(t, world[2:])
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name   string
		corpus string
		ctx    context.Context
		want   string
	}{
		{"corrupt line", bad, context.Background(), "line 3: invalid JSON"},
		{"empty corpus", "\n", context.Background(), "no documents"},
		{"cancelled", corpusJSONL(t, world), cancelled, "context canceled"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			corpus := filepath.Join(root, "corpus.jsonl")
			if err := os.WriteFile(corpus, []byte(tt.corpus), 0o644); err != nil {
				t.Fatal(err)
			}
			dir := filepath.Join(root, "index")
			_, _, err := Build(tt.ctx, IndexConfig{Corpus: corpus, Dir: dir}, BuildOptions{})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Build error = %v, want one containing %q", err, tt.want)
			}
			if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("after a failed build, stat %s = %v, want not exist", dir, err)
			}
			assertNoScratch(t, dir)
		})
	}
}

func TestFailedRebuildKeepsOldIndex(t *testing.T) {
	dir := buildIndex(t, world)
	before, err := ReadMeta(dir)
	if err != nil {
		t.Fatal(err)
	}
	corpus := writeFile(t, "bad.jsonl", corpusJSONL(t, world[:1])+"{oops\n")
	if _, _, err := Build(context.Background(), IndexConfig{Corpus: corpus, Dir: dir}, BuildOptions{}); err == nil {
		t.Fatal("Build of a corrupt corpus succeeded")
	}
	after, err := ReadMeta(dir)
	if err != nil {
		t.Fatalf("old index unreadable after a failed rebuild: %v", err)
	}
	if diff := cmp.Diff(before, after); diff != "" {
		t.Errorf("meta changed by a failed rebuild (-want +got):\n%s", diff)
	}
	got, err := openIndex(t, dir).Retrieve(context.Background(), []string{"copper"}, 1)
	if err != nil || len(got[0]) != 1 || got[0][0].ID != "d3" {
		t.Errorf("old index after failed rebuild: Retrieve(copper) = %v, %v; want d3", got, err)
	}
	assertNoScratch(t, dir)
}

func TestBuildRemovesStaleScratch(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "index")
	// pid_max on Linux is at most 2^22, so this pid cannot be alive.
	stale := dir + tmpInfix + "99999999"
	if err := os.MkdirAll(filepath.Join(stale, bleveSubdir), 0o755); err != nil {
		t.Fatal(err)
	}
	corpus := writeFile(t, "corpus.jsonl", corpusJSONL(t, world))
	if _, _, err := Build(context.Background(), IndexConfig{Corpus: corpus, Dir: dir}, BuildOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stat %s = %v, want the dead build's scratch removed", stale, err)
	}
}

func TestOpenLocalRejectsIncompleteIndex(t *testing.T) {
	dir := buildIndex(t, world)
	// A directory that lost its meta file is what a crash before the rename would
	// have left had the build written in place; it must not open.
	if err := os.Remove(filepath.Join(dir, MetaFile)); err != nil {
		t.Fatal(err)
	}
	tests := map[string]string{"no meta": dir, "empty dir": t.TempDir()}
	for name, d := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := OpenLocal(d, LocalConfig{})
			if !errors.Is(err, ErrNotIndex) || !strings.Contains(err.Error(), "mempo index") {
				t.Errorf("OpenLocal(%s) error = %v, want ErrNotIndex with how to build one", d, err)
			}
		})
	}
	t.Run("wrong format", func(t *testing.T) {
		dir := buildIndex(t, world)
		m, err := ReadMeta(dir)
		if err != nil {
			t.Fatal(err)
		}
		m.Format = IndexFormat + 1
		b, _ := json.Marshal(m)
		if err := os.WriteFile(filepath.Join(dir, MetaFile), b, 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := OpenLocal(dir, LocalConfig{}); !errors.Is(err, ErrNotIndex) {
			t.Errorf("OpenLocal(format %d) error = %v, want ErrNotIndex", m.Format, err)
		}
	})
}

func TestBuildRefusesForeignDirectory(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "data")
	precious := filepath.Join(dir, "notes.txt")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(precious, []byte("keep me"), 0o644); err != nil {
		t.Fatal(err)
	}
	corpus := writeFile(t, "corpus.jsonl", corpusJSONL(t, world))
	_, _, err := Build(context.Background(), IndexConfig{Corpus: corpus, Dir: dir}, BuildOptions{Force: true})
	if err == nil || !strings.Contains(err.Error(), "is not an index") {
		t.Errorf("Build over a foreign directory error = %v, want a refusal", err)
	}
	if _, err := os.Stat(precious); err != nil {
		t.Errorf("foreign file after Build: %v, want it untouched", err)
	}
	// An empty directory, though, may become the index.
	empty := filepath.Join(root, "empty")
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Build(context.Background(), IndexConfig{Corpus: corpus, Dir: empty}, BuildOptions{}); err != nil {
		t.Errorf("Build into an empty directory: %v", err)
	}
}
