package index

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/mempo/mempo/agent/search"
	"github.com/mempo/mempo/format"
	"github.com/mempo/mempo/jobs"
)

// world is a small corpus in the shape of the synthetic task.
var world = []search.Doc{
	{ID: "d1", Title: "Varnak", Text: "Varnak is a city on the river Oss. The mayor of Varnak is Ilda Brenn."},
	{ID: "d2", Title: "Ilda Brenn", Text: "Ilda Brenn was born in Tessaly. She is the mayor of Varnak."},
	{ID: "d3", Title: "Tessaly", Text: "Tessaly is a province known for its copper mines."},
	{ID: "d4", Title: "Oss", Text: "The Oss is a river that flows through Varnak and Dremmel."},
	{ID: "d5", Title: "Dremmel", Text: "Dremmel is a town whose founder was Korr Alvane."},
	{ID: "d6", Title: "Korr Alvane", Text: "Korr Alvane founded Dremmel. His birthplace is Tessaly."},
}

// jsonl renders docs as a Search-R1 corpus.
func jsonl(t *testing.T, docs []search.Doc) string {
	t.Helper()
	var b strings.Builder
	for _, d := range docs {
		line, err := json.Marshal(map[string]string{"id": d.ID, "contents": search.JoinContents(d.Title, d.Text)})
		if err != nil {
			t.Fatal(err)
		}
		b.Write(line)
		b.WriteByte('\n')
	}
	return b.String()
}

// writeCorpus writes content to path and returns path.
func writeCorpus(t *testing.T, path, content string) string {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// mustRun runs the step and fails the test on an error.
func mustRun(t *testing.T, ctx context.Context, corpus string, spec jobs.Spec) *Result {
	t.Helper()
	res, err := Run(ctx, Config{Corpus: corpus}, spec)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// search1 returns the ids of the top hits for query in the index at dir.
func search1(t *testing.T, dir, query string) []string {
	t.Helper()
	l, err := search.OpenLocal(dir, search.LocalConfig{Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := l.Close(); err != nil {
			t.Error(err)
		}
	}()
	hits, err := l.Retrieve(context.Background(), []string{query}, 3)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, h := range hits[0] {
		ids = append(ids, h.ID)
	}
	return ids
}

// snapshot is every file under dir with its bytes and modification time.
type snapshot map[string]fileState

type fileState struct {
	Data  string
	MTime time.Time
}

func snap(t *testing.T, dir string) snapshot {
	t.Helper()
	s := snapshot{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		s[filepath.ToSlash(rel)] = fileState{string(b), fi.ModTime()}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// assertOnly checks that root holds exactly names: no temp dir, lock or moved-aside
// index is left beside the output.
func assertOnly(t *testing.T, root string, names ...string) {
	t.Helper()
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Name())
	}
	slices.Sort(names)
	if !slices.Equal(got, names) {
		t.Errorf("%s holds %q, want only %q", root, got, names)
	}
}

func TestBuildCommitsAndSearches(t *testing.T) {
	root := t.TempDir()
	corpus := writeCorpus(t, filepath.Join(root, "corpus.jsonl"), jsonl(t, world))
	out := filepath.Join(root, "index")
	var progress bytes.Buffer
	res := mustRun(t, context.Background(), corpus, jobs.Spec{Out: out, Progress: jobs.ProgressPlain, ProgressOut: &progress})
	if res.Hit || res.Meta.Docs != int64(len(world)) {
		t.Fatalf("Run = hit %v, %d docs; want a build of %d", res.Hit, res.Meta.Docs, len(world))
	}
	c, err := format.ReadCommit(out)
	if err != nil {
		t.Fatal(err)
	}
	if c.Stage != "index" || c.CacheKey != res.Key.String() || len(c.Inputs) != 1 || c.Inputs[0].Path != corpus {
		t.Errorf("commit record = stage %q, key %.12s, inputs %+v; want stage index, key %s, the corpus at %s",
			c.Stage, c.CacheKey, c.Inputs, res.Key.Short(), corpus)
	}
	if _, ok := c.File(search.MetaFile); !ok || !slices.ContainsFunc(c.Files, func(f format.FileDigest) bool {
		return strings.HasPrefix(f.File, "bleve/")
	}) {
		t.Errorf("commit record lists %+v, want %s and bleve's files", c.Files, search.MetaFile)
	}
	if err := format.VerifyCheckpoint(out); err != nil {
		t.Error(err)
	}
	if got := search1(t, out, "founder of Dremmel"); len(got) == 0 || got[0] != "d5" {
		t.Errorf("search(founder of Dremmel) = %v, want d5 first", got)
	}
	if line := progress.String(); !strings.Contains(line, "index:") || !strings.Contains(line, "6 passages") {
		t.Errorf("progress = %q, want a line counting the 6 passages", line)
	}
	assertOnly(t, root, "corpus.jsonl", "index")
}

// TestSameCorpusSameFiles checks what two builds of one corpus share: the same files
// and the same mempo_index.json bytes (it holds no times or paths). bleve's own files
// are not byte-reproducible — its builder numbers a batch's documents in map order — so
// their sha256 sums, and the record digests, may differ; the hits do not.
func TestSameCorpusSameFiles(t *testing.T) {
	root := t.TempDir()
	corpus := writeCorpus(t, filepath.Join(root, "corpus.jsonl"), jsonl(t, world))
	a := mustRun(t, context.Background(), corpus, jobs.Spec{Out: filepath.Join(root, "a")})
	moved := filepath.Join(root, "moved.jsonl")
	if err := os.Rename(corpus, moved); err != nil {
		t.Fatal(err)
	}
	b := mustRun(t, context.Background(), moved, jobs.Spec{Out: filepath.Join(root, "b")})
	names := func(c *format.Commit) []string {
		var out []string
		for _, f := range c.Files {
			out = append(out, f.File)
		}
		return out
	}
	if diff := cmp.Diff(names(a.Commit), names(b.Commit)); diff != "" {
		t.Errorf("two builds of the same corpus list different files (-a +b):\n%s", diff)
	}
	ma, _ := a.Commit.File(search.MetaFile)
	mb, _ := b.Commit.File(search.MetaFile)
	if ma != mb || a.Key != b.Key {
		t.Errorf("%s = %+v and %+v, keys %s and %s; want the same bytes and key from the same corpus bytes", search.MetaFile, ma, mb, a.Key.Short(), b.Key.Short())
	}
}

func TestRerunIsCacheHit(t *testing.T) {
	root := t.TempDir()
	corpus := writeCorpus(t, filepath.Join(root, "corpus.jsonl"), jsonl(t, world))
	out := filepath.Join(root, "index")
	first := mustRun(t, context.Background(), corpus, jobs.Spec{Out: out})
	before := snap(t, out)

	// The same bytes elsewhere are the same input: the path is not keyed.
	moved := filepath.Join(root, "moved.jsonl")
	if err := os.Rename(corpus, moved); err != nil {
		t.Fatal(err)
	}
	var progress bytes.Buffer
	steps := 0
	again := mustRun(t, context.Background(), moved, jobs.Spec{Out: out, Progress: jobs.ProgressPlain, ProgressOut: &progress,
		Trace: func(jobs.Step, int) { steps++ }})
	if !again.Hit || again.Key != first.Key || again.Meta.Docs != first.Meta.Docs {
		t.Fatalf("rerun = hit %v, key %s, %d docs; want a hit of key %s with %d docs",
			again.Hit, again.Key.Short(), again.Meta.Docs, first.Key.Short(), first.Meta.Docs)
	}
	if steps != 0 || progress.Len() != 0 {
		t.Errorf("cache hit took %d commit steps and reported progress %q, want no work", steps, progress.String())
	}
	if diff := cmp.Diff(before, snap(t, out)); diff != "" {
		t.Errorf("cache hit changed the index (-before +after):\n%s", diff)
	}
}

// TestKeyIsTheIndexFormat: the key names the index format where other steps name the
// binary's code version, so a new binary keeps its indexes.
func TestKeyIsTheIndexFormat(t *testing.T) {
	root := t.TempDir()
	corpus := writeCorpus(t, filepath.Join(root, "corpus.jsonl"), jsonl(t, world))
	var debug bytes.Buffer
	mustRun(t, context.Background(), corpus, jobs.Spec{Out: filepath.Join(root, "index"), KeyDebug: &debug})
	want := fmt.Sprintf("code \\\"index format %d\\\"", search.IndexFormat)
	if !strings.Contains(debug.String(), want) || strings.Contains(debug.String(), jobs.CodeVersion()) {
		t.Errorf("index key preimage lacks %s or names the code version %s:\n%s", want, jobs.CodeVersion(), debug.String())
	}
}

func TestChangedCorpusRebuilds(t *testing.T) {
	root := t.TempDir()
	corpus := writeCorpus(t, filepath.Join(root, "corpus.jsonl"), jsonl(t, world))
	out := filepath.Join(root, "index")
	first := mustRun(t, context.Background(), corpus, jobs.Spec{Out: out})
	writeCorpus(t, corpus, jsonl(t, world[:3]))
	changed := mustRun(t, context.Background(), corpus, jobs.Spec{Out: out})
	if changed.Hit || changed.Key == first.Key || changed.Meta.Docs != 3 {
		t.Fatalf("after a corpus change: hit %v, key changed %v, %d docs; want a rebuild of 3", changed.Hit, changed.Key != first.Key, changed.Meta.Docs)
	}
	if got := search1(t, out, "founder of Dremmel"); slices.Contains(got, "d5") {
		t.Errorf("rebuilt index still returns d5, which the new corpus no longer holds: %v", got)
	}
	assertOnly(t, root, "corpus.jsonl", "index")
}

func TestForceRebuilds(t *testing.T) {
	root := t.TempDir()
	corpus := writeCorpus(t, filepath.Join(root, "corpus.jsonl"), jsonl(t, world))
	out := filepath.Join(root, "index")
	first := mustRun(t, context.Background(), corpus, jobs.Spec{Out: out})
	steps := 0
	forced := mustRun(t, context.Background(), corpus, jobs.Spec{Out: out, Force: true, Trace: func(jobs.Step, int) { steps++ }})
	if forced.Hit || steps == 0 || forced.Key != first.Key {
		t.Errorf("--force = hit %v after %d commit steps, key %s; want a rebuild of key %s", forced.Hit, steps, forced.Key.Short(), first.Key.Short())
	}
	if err := format.VerifyCheckpoint(out); err != nil {
		t.Error(err)
	}
	assertOnly(t, root, "corpus.jsonl", "index")
}

// failures are builds that stop midway: a corrupt line after good ones, an empty
// corpus, a cancelled context.
func failures(t *testing.T) []struct {
	name, corpus, want string
	ctx                context.Context
} {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	return []struct {
		name, corpus, want string
		ctx                context.Context
	}{
		{"corrupt line", jsonl(t, world[:2]) + "{not json\n" + jsonl(t, world[2:]), "line 3: invalid JSON", context.Background()},
		{"empty corpus", "\n", "no documents", context.Background()},
		{"cancelled", jsonl(t, world), "context canceled", cancelled},
	}
}

func TestFailedBuildKeepsPreviousIndex(t *testing.T) {
	for _, tt := range failures(t) {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			good := writeCorpus(t, filepath.Join(root, "good.jsonl"), jsonl(t, world[:4]))
			out := filepath.Join(root, "index")
			mustRun(t, context.Background(), good, jobs.Spec{Out: out})
			before := snap(t, out)
			bad := writeCorpus(t, filepath.Join(root, "bad.jsonl"), tt.corpus)
			_, err := Run(tt.ctx, Config{Corpus: bad}, jobs.Spec{Out: out})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Run error = %v, want one containing %q", err, tt.want)
			}
			if diff := cmp.Diff(before, snap(t, out)); diff != "" {
				t.Errorf("failed build changed the previous index (-before +after):\n%s", diff)
			}
			if got := search1(t, out, "copper mines"); len(got) == 0 || got[0] != "d3" {
				t.Errorf("previous index after a failed build: search(copper mines) = %v, want d3", got)
			}
			assertOnly(t, root, "bad.jsonl", "good.jsonl", "index")
		})
	}
}

func TestFailedFirstBuildLeavesNothing(t *testing.T) {
	for _, tt := range failures(t) {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			corpus := writeCorpus(t, filepath.Join(root, "corpus.jsonl"), tt.corpus)
			if _, err := Run(tt.ctx, Config{Corpus: corpus}, jobs.Spec{Out: filepath.Join(root, "index")}); err == nil {
				t.Fatal("Run succeeded, want an error")
			}
			assertOnly(t, root, "corpus.jsonl")
		})
	}
}

// TestOpenDoesNotModify checks that reading an index writes nothing into it: bleve
// opens it read-only, so every file keeps the sha256 its commit record lists and no
// file is added.
func TestOpenDoesNotModify(t *testing.T) {
	root := t.TempDir()
	corpus := writeCorpus(t, filepath.Join(root, "corpus.jsonl"), jsonl(t, world))
	out := filepath.Join(root, "index")
	mustRun(t, context.Background(), corpus, jobs.Spec{Out: out})
	before := snap(t, out)
	for range 2 {
		if got := search1(t, out, "Ilda Brenn born"); len(got) == 0 || got[0] != "d2" {
			t.Errorf("search(Ilda Brenn born) = %v, want d2 first", got)
		}
	}
	if err := format.VerifyCheckpoint(out); err != nil {
		t.Errorf("after open, search and close: %v", err)
	}
	if diff := cmp.Diff(before, snap(t, out)); diff != "" {
		t.Errorf("open, search and close changed the index (-before +after):\n%s", diff)
	}
}

func TestOpenRejectsDirectoryWithoutRecord(t *testing.T) {
	root := t.TempDir()
	corpus := writeCorpus(t, filepath.Join(root, "corpus.jsonl"), jsonl(t, world))
	out := filepath.Join(root, "index")
	mustRun(t, context.Background(), corpus, jobs.Spec{Out: out})
	if err := os.Remove(filepath.Join(out, format.CommitFile)); err != nil {
		t.Fatal(err)
	}
	_, err := search.OpenLocal(out, search.LocalConfig{})
	if !errors.Is(err, search.ErrNotIndex) || !strings.Contains(err.Error(), "build one with `mempo index --corpus FILE --out "+out+"`") {
		t.Errorf("OpenLocal of an index without %s = %v, want ErrNotIndex saying how to build one", format.CommitFile, err)
	}
	// The step itself rebuilds it: a directory with mempo_index.json is an index to replace.
	if res := mustRun(t, context.Background(), corpus, jobs.Spec{Out: out}); res.Hit {
		t.Error("Run over an index without a commit record = cache hit, want a rebuild")
	}
	if got := search1(t, out, "copper"); len(got) == 0 || got[0] != "d3" {
		t.Errorf("rebuilt index: search(copper) = %v, want d3", got)
	}
}

func TestRefusesForeignDirectory(t *testing.T) {
	root := t.TempDir()
	corpus := writeCorpus(t, filepath.Join(root, "corpus.jsonl"), jsonl(t, world))
	dir := filepath.Join(root, "data")
	precious := filepath.Join(dir, "notes.txt")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeCorpus(t, precious, "keep me")
	_, err := Run(context.Background(), Config{Corpus: corpus}, jobs.Spec{Out: dir, Force: true})
	if !errors.Is(err, ErrInput) || !strings.Contains(err.Error(), "is not an index") {
		t.Errorf("Run over a foreign directory = %v, want ErrInput refusing it", err)
	}
	if _, err := os.Stat(precious); err != nil {
		t.Errorf("foreign file after Run: %v, want it untouched", err)
	}
	// An empty directory, though, may become the index.
	empty := filepath.Join(root, "empty")
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	mustRun(t, context.Background(), corpus, jobs.Spec{Out: empty})
}

func TestRemovesLeftoversOfDeadWriters(t *testing.T) {
	root := t.TempDir()
	corpus := writeCorpus(t, filepath.Join(root, "corpus.jsonl"), jsonl(t, world))
	out := filepath.Join(root, "index")
	// The temp dir of another key, as a build killed midway leaves it.
	stale := out + ".tmp-0123456789ab"
	if err := os.MkdirAll(filepath.Join(stale, "bleve"), 0o755); err != nil {
		t.Fatal(err)
	}
	mustRun(t, context.Background(), corpus, jobs.Spec{Out: out})
	assertOnly(t, root, "corpus.jsonl", "index")
}

func TestRunNeedsCorpusAndOut(t *testing.T) {
	corpus := writeCorpus(t, filepath.Join(t.TempDir(), "corpus.jsonl"), jsonl(t, world))
	for _, tt := range []struct {
		cfg  Config
		out  string
		want string
	}{
		{Config{Corpus: corpus}, "", "--out"},
		{Config{}, filepath.Join(t.TempDir(), "index"), "--corpus"},
		{Config{Corpus: filepath.Join(t.TempDir(), "absent.jsonl")}, filepath.Join(t.TempDir(), "index"), "absent.jsonl"},
	} {
		if _, err := Run(context.Background(), tt.cfg, jobs.Spec{Out: tt.out}); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Run(%+v, out %q) = %v, want an error naming %s", tt.cfg, tt.out, err, tt.want)
		}
	}
}
