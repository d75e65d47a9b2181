package search

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/mempo/mempo/format"
	"github.com/mempo/mempo/jobs"
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

// buildIndex writes docs as a corpus, indexes it into a fresh directory and commits it
// as the index step does (stages/index, whose tests cover the step itself): Write
// into the temp dir of jobs.Begin, then Artifact.Publish with stage Stage.
func buildIndex(t testing.TB, docs []Doc) string {
	t.Helper()
	root := t.TempDir()
	corpus := filepath.Join(root, "corpus.jsonl")
	if err := os.WriteFile(corpus, []byte(corpusJSONL(t, docs)), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "index")
	a, _, err := jobs.Begin(jobs.Spec{Out: dir}, jobs.Key{1})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Release()
	if _, err := Write(context.Background(), corpus, a.Tmp, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Publish(format.Commit{Stage: Stage}); err != nil {
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

func TestOpenLocalRejectsIncompleteIndex(t *testing.T) {
	dir := buildIndex(t, world)
	// A directory without its commit record is what a build that wrote in place would
	// leave when killed, and what an index written before commit records is; it must
	// not open.
	if err := os.Remove(filepath.Join(dir, format.CommitFile)); err != nil {
		t.Fatal(err)
	}
	tests := map[string]string{"no record": dir, "empty dir": t.TempDir()}
	for name, d := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := OpenLocal(d, LocalConfig{})
			if !errors.Is(err, ErrNotIndex) || !strings.Contains(err.Error(), "build one with `mempo index --corpus FILE --out") {
				t.Errorf("OpenLocal(%s) error = %v, want ErrNotIndex with how to build one", d, err)
			}
		})
	}
	// rewrite replaces the commit record of a fresh index with what edit makes of it.
	rewrite := func(t *testing.T, edit func(c *format.Commit, dir string)) string {
		dir := buildIndex(t, world)
		c, err := format.ReadCommit(dir)
		if err != nil {
			t.Fatal(err)
		}
		edit(c, dir)
		if err := jobs.WriteJSON(filepath.Join(dir, format.CommitFile), c); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	for name, edit := range map[string]func(c *format.Commit, dir string){
		"another stage": func(c *format.Commit, _ string) { c.Stage = "init-model" },
		"meta not recorded": func(c *format.Commit, _ string) {
			c.Files = slices.DeleteFunc(c.Files, func(f format.FileDigest) bool { return f.File == MetaFile })
		},
		"wrong format": func(c *format.Commit, dir string) {
			m, err := ReadMeta(dir)
			if err != nil {
				t.Fatal(err)
			}
			m.Format = IndexFormat + 1
			b, _ := json.Marshal(m)
			if err := os.WriteFile(filepath.Join(dir, MetaFile), b, 0o644); err != nil {
				t.Fatal(err)
			}
			sum := sha256.Sum256(b)
			for i := range c.Files {
				if c.Files[i].File == MetaFile {
					c.Files[i].SHA256, c.Files[i].Bytes = hex.EncodeToString(sum[:]), int64(len(b))
				}
			}
		},
		"meta changed after the commit": func(_ *format.Commit, dir string) {
			path := filepath.Join(dir, MetaFile)
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, bytes.Replace(b, []byte(`"docs": 8`), []byte(`"docs": 9`), 1), 0o644); err != nil {
				t.Fatal(err)
			}
		},
	} {
		t.Run(name, func(t *testing.T) {
			dir := rewrite(t, edit)
			if _, err := OpenLocal(dir, LocalConfig{}); !errors.Is(err, ErrNotIndex) {
				t.Errorf("OpenLocal error = %v, want ErrNotIndex", err)
			}
		})
	}
}

func TestMetaHoldsNoRunRecord(t *testing.T) {
	dir := buildIndex(t, world)
	m, err := ReadMeta(dir)
	if err != nil {
		t.Fatal(err)
	}
	if m.Docs != int64(len(world)) || m.Analysis != CurrentAnalysis() {
		t.Errorf("ReadMeta = %+v, want %d docs and analysis %+v", m, len(world), CurrentAnalysis())
	}
	b, err := os.ReadFile(filepath.Join(dir, MetaFile))
	if err != nil {
		t.Fatal(err)
	}
	var fields map[string]any
	if err := json.Unmarshal(b, &fields); err != nil {
		t.Fatal(err)
	}
	want := []string{"analyzer", "corpus", "docs", "format", "scoring"}
	if got := slices.Sorted(maps.Keys(fields)); !slices.Equal(got, want) {
		t.Errorf("%s fields = %q, want %q (nothing of the run: no time, path or key)", MetaFile, got, want)
	}
}
