package eval

import (
	"bytes"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/mempo/mempo/format"
	"github.com/mempo/mempo/stages/task"
)

func fixture(t *testing.T) Run {
	t.Helper()
	dir := t.TempDir()
	scores := []format.Score{
		{UID: "a", Sample: 0, EM: []float32{1, 1}, F1: []float32{1, 1}, FormatOK: true, Reward: 1, TT: 100, PT: 40, Turns: 3},
		{UID: "b", Sample: 0, EM: []float32{1, 0}, F1: []float32{1, 0.5}, FormatOK: true, Reward: 0, TT: 300, PT: 60, Turns: 5},
	}
	rolls := []format.Rollout{
		{UID: "a", Turn: 0, Action: "search", Memory: "", Observation: "Doc 1(Title: \"Ada\") Ada was born in 1901."},
		{UID: "a", Turn: 1, Action: "invalid"},
		{UID: "a", Turn: 2, Action: "answer", Memory: "Ada born 1901"},
		{UID: "b", Turn: 0, Action: "search", Observation: "Bo works for Acme. Cy lives in Oslo."},
		{UID: "b", Turn: 1, Action: "answer", Memory: "Bo employer Acme"},
	}
	r := Run{Label: "mempo", K: 2, Rollouts: filepath.Join(dir, "rollouts"), Scores: filepath.Join(dir, "scores")}
	if _, err := format.WriteDataset(r.Scores, "test", [][]format.Score{scores}); err != nil {
		t.Fatal(err)
	}
	if _, err := format.WriteDataset(r.Rollouts, "test", [][]format.Rollout{rolls}); err != nil {
		t.Fatal(err)
	}
	return r
}

func TestSummarize(t *testing.T) {
	facts := func(uid string) []task.Hop {
		return map[string][]task.Hop{
			"a": {{Subject: "Ada", Value: "1901"}},
			"b": {{Subject: "Bo", Value: "Acme"}, {Subject: "Cy", Value: "Oslo"}},
		}[uid]
	}
	got, err := Summarize(fixture(t), facts)
	if err != nil {
		t.Fatal(err)
	}
	want := Row{Label: "mempo", K: 2, N: 2, F1: 0.875, EM: 0.75, Success: 0.5, TT: 200, PT: 50, Turns: 4,
		Invalid: 0.2, Retention: 2.0 / 3, FactsFound: 3}
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	if got.N != want.N || !near(got.F1, want.F1) || !near(got.EM, want.EM) || !near(got.Success, want.Success) ||
		!near(got.TT, want.TT) || !near(got.PT, want.PT) || !near(got.Turns, want.Turns) ||
		!near(got.Invalid, want.Invalid) || !near(got.Retention, want.Retention) || got.FactsFound != want.FactsFound {
		t.Errorf("Summarize = %+v, want %+v", got, want)
	}
	noFacts, err := Summarize(fixture(t), nil)
	if err != nil || noFacts.Retention != -1 {
		t.Errorf("Summarize without facts: retention %v, %v; want -1 (unknown)", noFacts.Retention, err)
	}
}

func TestTables(t *testing.T) {
	rows := []Row{{Label: "sft", K: 2, N: 10, F1: 0.5, Retention: -1}, {Label: "mempo", K: 2, N: 10, F1: 0.625, Retention: 0.9}}
	var md, csv bytes.Buffer
	if err := WriteMarkdown(&md, rows); err != nil {
		t.Fatal(err)
	}
	if err := WriteCSV(&csv, rows); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(md.String(), "| mempo | 2 | 10 | 0.625 |") || strings.Count(md.String(), "\n") != 4 {
		t.Errorf("markdown table:\n%s", md.String())
	}
	if lines := strings.Split(strings.TrimSpace(csv.String()), "\n"); len(lines) != 3 || !strings.HasPrefix(lines[2], "mempo,2,10,0.625") {
		t.Errorf("csv table:\n%s", csv.String())
	}
}

func TestPlotPNG(t *testing.T) {
	rows := []Row{{Label: "mempo", K: 4, PT: 90}, {Label: "mempo", K: 2, PT: 80}, {Label: "full", K: 2, PT: 100}, {Label: "full", K: 4, PT: 200}}
	series := ByK(rows, func(r Row) float64 { return r.PT })
	if len(series) != 2 || series[0].Label != "mempo" || series[0].Points[0].X != 2 || series[1].Points[1].Y != 200 {
		t.Fatalf("ByK = %+v, want mempo then full, points sorted by K", series)
	}
	path := filepath.Join(t.TempDir(), "pt.png")
	if err := PlotPNG(path, "PT vs K", "K", "peak tokens", series); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("decode %s: %v", path, err)
	}
	if b := img.Bounds(); b.Dx() < 200 || b.Dy() < 100 {
		t.Errorf("plot is %v, want a real figure", b)
	}
}

func TestRunCurves(t *testing.T) {
	dir := t.TempDir()
	for k, rewards := range map[int][]float32{1: {0, 1}, 2: {1, 1}} {
		it := filepath.Join(dir, "iter-"+strconv.Itoa(k))
		var rows []format.Score
		for i, r := range rewards {
			rows = append(rows, format.Score{UID: "q", Sample: int32(i), Reward: r})
		}
		if err := os.MkdirAll(it, 0o755); err != nil {
			t.Fatal(err)
		}
		if _, err := format.WriteDataset(filepath.Join(it, "scores"), "test", [][]format.Score{rows}); err != nil {
			t.Fatal(err)
		}
		if k == 1 {
			os.MkdirAll(filepath.Join(it, "policy"), 0o755)
			if err := os.WriteFile(filepath.Join(it, "policy", "trainer_state.json"), []byte(`{"metrics": {"kl": 0.003}}`), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	os.MkdirAll(filepath.Join(dir, "iter-x"), 0o755) // not an iteration
	c, err := RunCurves(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Reward) != 2 || c.Reward[0] != (Point{1, 0.5}) || c.Reward[1] != (Point{2, 1}) {
		t.Errorf("reward curve = %v, want [{1 0.5} {2 1}]", c.Reward)
	}
	if len(c.KL) != 1 || c.KL[0] != (Point{1, 0.003}) {
		t.Errorf("kl curve = %v, want [{1 0.003}] (iteration 2 has no policy yet)", c.KL)
	}
}
