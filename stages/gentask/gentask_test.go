package gentask

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/mempo/mempo/agent/task"
	"github.com/mempo/mempo/format"
	"github.com/mempo/mempo/jobs"
)

// tinyConfig is a world small enough for a quick test and big enough for distinct
// questions at K = 4.
func tinyConfig(seed uint64) task.Config {
	return task.Config{Seed: seed, People: 40, Cities: 12, Companies: 12, Countries: 4,
		TwinRate: 0.3, TwoHopRate: 0.4, TrainK: 2, Train: 30, TestK: []int{2, 4}, Test: 8}
}

func runTask(t *testing.T, cfg task.Config, out string) (*task.Summary, string) {
	t.Helper()
	var stdout bytes.Buffer
	s, err := Run(context.Background(), cfg, jobs.Spec{Out: out, Stdout: &stdout})
	if err != nil {
		t.Fatalf("Run(seed %d, %s): %v", cfg.Seed, out, err)
	}
	return s, stdout.String()
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func readSet(t *testing.T, dir string) []format.Prompt {
	t.Helper()
	rows, err := format.ReadDataset[format.Prompt](dir)
	if err != nil {
		t.Fatalf("read %s: %v", dir, err)
	}
	return rows
}

func TestRunWritesTaskDir(t *testing.T) {
	cfg := tinyConfig(1)
	out := filepath.Join(t.TempDir(), "task")
	s, _ := runTask(t, cfg, out)
	w, err := task.Generate(cfg)
	if err != nil {
		t.Fatal(err)
	}

	var corpus bytes.Buffer
	if err := task.WriteJSONL(&corpus, w.Docs()); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(out, task.CorpusFile)); !bytes.Equal(got, corpus.Bytes()) {
		t.Errorf("%s: %d bytes differ from the world's %d-document corpus", task.CorpusFile, len(got), len(w.Docs()))
	}

	var want []task.Dataset
	for _, d := range []struct {
		dir   string
		split string
		k     int
		n     int
	}{{task.TrainDir, "train", 2, 30}, {task.TestDir(2), "test", 2, 8}, {task.TestDir(4), "test", 4, 8}} {
		rows := readSet(t, filepath.Join(out, d.dir))
		if len(rows) != d.n {
			t.Fatalf("%s: %d rows, want %d", d.dir, len(rows), d.n)
		}
		for i, p := range rows {
			if p.DataSource != task.DataSource || p.Split != d.split || len(p.Golds) != d.k || len(p.SourceIndex) != d.k ||
				strings.Count(p.Question, "; ") != d.k-1 {
				t.Errorf("%s row %d = %+v, want %s %s with %d objectives", d.dir, i, p, task.DataSource, d.split, d.k)
			}
		}
		m, err := format.ReadManifest(filepath.Join(out, d.dir))
		if err != nil {
			t.Fatal(err)
		}
		if m.Stage != Stage || m.Seed != 1 {
			t.Errorf("%s manifest stage %q seed %d, want %q seed 1", d.dir, m.Stage, m.Seed, Stage)
		}
		want = append(want, task.Dataset{Dir: d.dir, Split: d.split, K: d.k, Rows: int64(d.n), Digest: m.Digest()})
	}
	// The train rows are the world's train prompts, in order, golds intact, with every
	// hop as a [subject, value] fact; each hop's own document holds its fact, and a fact
	// names the gold answer where the hop is an objective's last.
	train := readSet(t, filepath.Join(out, task.TrainDir))
	docs := map[string]string{}
	for _, d := range w.Docs() {
		docs[d.ID] = d.Contents
	}
	for i, p := range w.Train {
		got := train[i]
		if got.UID != p.UID || got.Question != p.Question || !cmp.Equal(got.Golds, p.Golds) {
			t.Errorf("train row %d = %+v, want uid %s question %q golds %v", i, got, p.UID, p.Question, p.Golds)
		}
		hops := p.Facts()
		if len(got.Facts) != len(hops) || len(hops) < p.K {
			t.Fatalf("train row %d: %d facts, want one per hop (%d, at least K = %d)", i, len(got.Facts), len(hops), p.K)
		}
		for j, h := range hops {
			if !cmp.Equal(got.Facts[j], []string{h.Subject, h.Value}) {
				t.Errorf("train row %d fact %d = %q, want [%q %q]", i, j, got.Facts[j], h.Subject, h.Value)
			}
			if !format.FactHeld(docs[h.DocID], got.Facts[j]) {
				t.Errorf("train row %d fact %q: its document %s does not hold it: %q", i, got.Facts[j], h.DocID, docs[h.DocID])
			}
		}
	}
	if diff := cmp.Diff(want, s.Datasets); diff != "" {
		t.Errorf("Summary.Datasets (-want +got):\n%s", diff)
	}

	var onDisk task.Summary
	if err := json.Unmarshal(readFile(t, filepath.Join(out, task.SummaryFile)), &onDisk); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(s, &onDisk); diff != "" {
		t.Errorf("%s (-returned +on disk):\n%s", task.SummaryFile, diff)
	}
	if onDisk.Corpus.Docs != len(w.Entities) || onDisk.Distractors == 0 || onDisk.Distractors >= onDisk.Entities {
		t.Errorf("summary corpus %+v, %d distractors of %d entities; want one doc per entity and some distractors",
			onDisk.Corpus, onDisk.Distractors, onDisk.Entities)
	}
}

func TestRunDeterministicAndCached(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	sa, _ := runTask(t, tinyConfig(7), a)
	sb, _ := runTask(t, tinyConfig(7), b)
	if diff := cmp.Diff(sa, sb); diff != "" {
		t.Errorf("two runs of seed 7 (-first +second):\n%s", diff)
	}
	for _, f := range []string{task.CorpusFile, task.SummaryFile} {
		if !bytes.Equal(readFile(t, filepath.Join(a, f)), readFile(t, filepath.Join(b, f))) {
			t.Errorf("%s differs between two runs of seed 7", f)
		}
	}

	before, err := os.Stat(filepath.Join(a, task.SummaryFile))
	if err != nil {
		t.Fatal(err)
	}
	again, stdout := runTask(t, tinyConfig(7), a)
	if got := strings.Count(stdout, "cache hit"); got != 3 {
		t.Errorf("rerun: %d cache hits, want 3 (train, test k2, test k4); stdout:\n%s", got, stdout)
	}
	if diff := cmp.Diff(sa, again); diff != "" {
		t.Errorf("rerun summary (-first +rerun):\n%s", diff)
	}
	after, err := os.Stat(filepath.Join(a, task.SummaryFile))
	if err != nil {
		t.Fatal(err)
	}
	if !os.SameFile(before, after) {
		t.Errorf("an unchanged rerun replaced %s; want it left as it was", task.SummaryFile)
	}

	other, stdout := runTask(t, tinyConfig(8), a)
	if strings.Contains(stdout, "cache hit") {
		t.Errorf("seed 8 over seed 7: %q, want no cache hit", stdout)
	}
	for i := range other.Datasets {
		if other.Datasets[i].Digest == sa.Datasets[i].Digest {
			t.Errorf("%s: seeds 7 and 8 give the same digest %s", other.Datasets[i].Dir, sa.Datasets[i].Digest)
		}
	}
	if other.Corpus.SHA256 == sa.Corpus.SHA256 {
		t.Errorf("seeds 7 and 8 give the same corpus")
	}
}

func TestRunInterruptedDropsStaleSummary(t *testing.T) {
	out := filepath.Join(t.TempDir(), "task")
	runTask(t, tinyConfig(1), out)
	// Seed 2 is cancelled once its train set is recorded: the seed-1 task.json must be
	// gone, not left describing a corpus that is now seed 2's.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	spec := jobs.Spec{Out: out, Trace: func(step jobs.Step, _ int) {
		if step == jobs.StepRecorded {
			cancel()
		}
	}}
	if _, err := Run(ctx, tinyConfig(2), spec); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Run = %v, want context.Canceled", err)
	}
	if _, err := os.Stat(filepath.Join(out, task.SummaryFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("after an interrupted run of another seed, %s: stat err %v, want it removed", task.SummaryFile, err)
	}
	s, _ := runTask(t, tinyConfig(2), out)
	if s.Config.Seed != 2 {
		t.Errorf("rerun summary seed %d, want 2", s.Config.Seed)
	}
}

func TestRunEmptyTestSet(t *testing.T) {
	cfg := tinyConfig(1)
	cfg.Test = 0
	out := filepath.Join(t.TempDir(), "task")
	s, _ := runTask(t, cfg, out)
	for _, d := range s.Datasets[1:] {
		if d.Rows != 0 || len(readSet(t, filepath.Join(out, d.Dir))) != 0 {
			t.Errorf("%s: %d rows, want an empty dataset", d.Dir, d.Rows)
		}
	}
}

func TestRunErrors(t *testing.T) {
	dup := tinyConfig(1)
	dup.TestK = []int{2, 4, 2}
	bad := tinyConfig(1)
	bad.Countries = 0
	tests := []struct {
		name string
		cfg  task.Config
		spec jobs.Spec
		is   error
		msg  string
	}{
		{"duplicate test k", dup, jobs.Spec{}, task.ErrConfig, "--test-k [2 4 2]: 2 twice"},
		{"bad world", bad, jobs.Spec{}, task.ErrConfig, "--countries 0"},
		{"shard", tinyConfig(1), jobs.Spec{Part: jobs.Part{Index: 0, Count: 2}}, jobs.ErrSpec, "--shard"},
		{"merge", tinyConfig(1), jobs.Spec{Merge: 2}, jobs.ErrSpec, "--merge"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "task")
			tt.spec.Out = out
			_, err := Run(context.Background(), tt.cfg, tt.spec)
			if !errors.Is(err, tt.is) || !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("Run = %v, want %v mentioning %q", err, tt.is, tt.msg)
			}
			if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("a rejected run created %s (stat err %v)", out, err)
			}
		})
	}
}

func TestLoad(t *testing.T) {
	cfg := tinyConfig(3)
	dir := filepath.Join(t.TempDir(), "task")
	runTask(t, cfg, dir)
	w, s, err := task.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	want, err := task.Generate(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if s.Config.Seed != cfg.Seed || len(w.Train) != len(want.Train) || w.Train[0].UID != want.Train[0].UID {
		t.Errorf("Load regenerated seed %d with %d train prompts (first %s), want seed %d, %d (first %s)",
			s.Config.Seed, len(w.Train), w.Train[0].UID, cfg.Seed, len(want.Train), want.Train[0].UID)
	}
	if _, _, err := task.Load(t.TempDir()); err == nil {
		t.Error("Load of a directory without task.json = nil error")
	}
}
