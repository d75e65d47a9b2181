package eval

import (
	"image/png"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/mempo/mempo/agent/task"
	"github.com/mempo/mempo/format"
	"github.com/mempo/mempo/format/formattest"
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
	if _, err := formattest.WriteDataset(r.Scores, "test", [][]format.Score{scores}); err != nil {
		t.Fatal(err)
	}
	if _, err := formattest.WriteDataset(r.Rollouts, "test", [][]format.Rollout{rolls}); err != nil {
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
	// The values the table showed before eval computed figures per question: means
	// over trajectories, rates as ratios of sums over trajectories.
	tests := []struct {
		name  string
		run   func(*testing.T) Run
		facts Facts
		want  Row
	}{
		{"one trajectory per question", fixture, facts, Row{Label: "mempo", K: 2, N: 2, F1: 0.875, EM: 0.75, Success: 0.5,
			TT: 200, PT: 50, Turns: 4, Invalid: 0.2, Retention: 2.0 / 3, FactsFound: 3}},
		{"without facts", fixture, nil, Row{Label: "mempo", K: 2, N: 2, F1: 0.875, EM: 0.75, Success: 0.5,
			TT: 200, PT: 50, Turns: 4, Invalid: 0.2, Retention: -1}},
		{"two trajectories per question", fixtureN2, facts, Row{Label: "mempo", K: 2, N: 4, F1: 0.5625, EM: 0.375, Success: 0.25,
			TT: 175, PT: 47.5, Turns: 2.5, Invalid: 0.3, Retention: 2.0 / 4, FactsFound: 4}},
	}
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Summarize(tt.run(t), tt.facts)
			if err != nil {
				t.Fatal(err)
			}
			want := tt.want
			if got.N != want.N || !near(got.F1, want.F1) || !near(got.EM, want.EM) || !near(got.Success, want.Success) ||
				!near(got.TT, want.TT) || !near(got.PT, want.PT) || !near(got.Turns, want.Turns) ||
				!near(got.Invalid, want.Invalid) || !near(got.Retention, want.Retention) || got.FactsFound != want.FactsFound {
				t.Errorf("Summarize = %+v, want %+v", got, want)
			}
		})
	}
}

// fixtureN2 is a run with two trajectories per question (eval --n 2).
func fixtureN2(t *testing.T) Run {
	t.Helper()
	dir := t.TempDir()
	scores := []format.Score{
		{UID: "a", Sample: 0, EM: []float32{1, 1}, F1: []float32{1, 1}, FormatOK: true, Reward: 1, TT: 100, PT: 40, Turns: 3},
		{UID: "a", Sample: 1, EM: []float32{0, 0}, F1: []float32{0, 0}, FormatOK: true, Reward: 0, TT: 100, PT: 40, Turns: 1},
		{UID: "b", Sample: 0, EM: []float32{1, 0}, F1: []float32{1, 0.5}, FormatOK: true, Reward: 0, TT: 300, PT: 60, Turns: 2},
		{UID: "b", Sample: 1, EM: []float32{0, 0}, F1: []float32{0.5, 0.5}, FormatOK: false, Reward: 0, TT: 200, PT: 50, Turns: 4},
	}
	rolls := []format.Rollout{
		{UID: "a", Sample: 0, Turn: 0, Action: "search", Observation: "Doc 1(Title: \"Ada\") Ada was born in 1901."},
		{UID: "a", Sample: 0, Turn: 1, Action: "invalid"},
		{UID: "a", Sample: 0, Turn: 2, Action: "answer", Memory: "Ada born 1901"},
		{UID: "a", Sample: 1, Turn: 0, Action: "answer"},
		{UID: "b", Sample: 0, Turn: 0, Action: "search", Observation: "Bo works for Acme. Cy lives in Oslo."},
		{UID: "b", Sample: 0, Turn: 1, Action: "answer", Memory: "Bo employer Acme"},
		{UID: "b", Sample: 1, Turn: 0, Action: "search", Observation: "Cy lives in Oslo."},
		{UID: "b", Sample: 1, Turn: 1, Action: "invalid"},
		{UID: "b", Sample: 1, Turn: 2, Action: "invalid"},
		{UID: "b", Sample: 1, Turn: 3, Action: "answer", Memory: "nothing"},
	}
	r := Run{Label: "mempo", K: 2, Rollouts: filepath.Join(dir, "rollouts"), Scores: filepath.Join(dir, "scores")}
	if _, err := formattest.WriteDataset(r.Scores, "test", [][]format.Score{scores}); err != nil {
		t.Fatal(err)
	}
	if _, err := formattest.WriteDataset(r.Rollouts, "test", [][]format.Rollout{rolls}); err != nil {
		t.Fatal(err)
	}
	return r
}

func TestPlotPNG(t *testing.T) {
	est := func(pt float64) (e [NumMetrics]Estimate) {
		for m := range e {
			e[m] = Estimate{math.NaN(), math.NaN(), math.NaN()}
		}
		e[PT] = Estimate{pt, pt - 5, pt + 5}
		return e
	}
	results := []Result{{Policy: "mempo", K: 4, Values: est(90)}, {Policy: "mempo", K: 2, Values: est(80)},
		{Policy: "full", K: 2, Values: est(100)}, {Policy: "full", K: 4, Values: est(200)}}
	series := ByK(results, PT)
	if len(series) != 2 || series[0].Label != "mempo" || series[0].Points[0].X != 2 || series[1].Points[1].Y != 200 ||
		series[0].Lo[0] != 75 || series[1].Hi[1] != 205 {
		t.Fatalf("ByK = %+v, want mempo then full, points sorted by K, with their intervals", series)
	}
	if got := ByK(results, Retention); len(got) != 2 || len(got[0].Points) != 0 {
		t.Errorf("ByK(unknown metric) = %+v, want series without points", got)
	}
	band := Series{Label: "band", Points: []Point{{1, 1}, {2, 2}}, Lo: []float64{0.5, 1.5}, Hi: []float64{1.5, 2.5}, Band: true}
	for name, series := range map[string][]Series{"error bars": series, "band": {band}, "plain": {{Label: "x", Points: []Point{{1, 1}}}}} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "pt.png")
			if err := PlotPNG(path, "PT vs K", "K", "peak tokens", series); err != nil {
				t.Fatal(err)
			}
			checkPNG(t, path)
		})
	}
	bad := []Series{{Label: "x", Points: []Point{{1, 1}}, Lo: []float64{1, 2}, Hi: []float64{1, 2}}}
	if err := PlotPNG(filepath.Join(t.TempDir(), "bad.png"), "", "", "", bad); err == nil {
		t.Errorf("PlotPNG(1 point, 2 intervals) = nil error, want one")
	}
}

// checkPNG fails unless path is a real figure.
func checkPNG(t *testing.T, path string) {
	t.Helper()
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
		t.Errorf("plot %s is %v, want a real figure", path, b)
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
		if _, err := formattest.WriteDataset(filepath.Join(it, "scores"), "test", [][]format.Score{rows}); err != nil {
			t.Fatal(err)
		}
		if k == 1 {
			os.MkdirAll(filepath.Join(it, "policy"), 0o755)
			if err := os.WriteFile(filepath.Join(it, "policy", "trainer_state.json"), []byte(`{"metrics": {"kl": 0.003}}`), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Iteration 1's advantages and rollouts manifests carry the outcome signal and the
	// format's figures; iteration 2 has neither yet.
	it1 := filepath.Join(dir, "iter-1")
	for name, metrics := range map[string]map[string]float64{
		"advantages": {"zero_spread_group_frac": 0.25},
		"rollouts":   {"invalid_turns": 3, "rows": 12},
	} {
		os.MkdirAll(filepath.Join(it1, name), 0o755)
		if err := format.WriteManifest(filepath.Join(it1, name), &format.Manifest{Kind: format.Kind(name), SchemaVersion: 1, Metrics: metrics}); err != nil {
			t.Fatal(err)
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
	if len(c.ZeroSpread) != 1 || c.ZeroSpread[0] != (Point{1, 0.25}) {
		t.Errorf("zero-spread curve = %v, want [{1 0.25}]", c.ZeroSpread)
	}
	if len(c.Invalid) != 1 || c.Invalid[0] != (Point{1, 0.25}) {
		t.Errorf("invalid curve = %v, want [{1 0.25}] (3 of 12 turns)", c.Invalid)
	}
	files, err := WriteCurves(t.TempDir(), []SeedCurves{{Name: "mempo", Dirs: []string{dir},
		Reward: SpreadOf([][]Point{c.Reward}), ZeroSpread: SpreadOf([][]Point{c.ZeroSpread}), Invalid: SpreadOf([][]Point{c.Invalid})}})
	if err != nil || !slices.Contains(files, "zero_spread_vs_iter.png") || !slices.Contains(files, "invalid_vs_iter.png") {
		t.Errorf("WriteCurves = %v, %v; want the zero-spread and invalid plots", files, err)
	}
}

func TestSeedCurves(t *testing.T) {
	// Two seeds of one variant; seed 2 has not finished iteration 2.
	writeIters := func(t *testing.T, rewards map[int][]float32, kl map[int]string) string {
		dir := t.TempDir()
		for k, rs := range rewards {
			it := filepath.Join(dir, "iter-"+strconv.Itoa(k))
			if err := os.MkdirAll(filepath.Join(it, "policy"), 0o755); err != nil {
				t.Fatal(err)
			}
			var rows []format.Score
			for i, r := range rs {
				rows = append(rows, format.Score{UID: "q", Sample: int32(i), Reward: r})
			}
			if _, err := formattest.WriteDataset(filepath.Join(it, "scores"), "test", [][]format.Score{rows}); err != nil {
				t.Fatal(err)
			}
			if v, ok := kl[k]; ok {
				if err := os.WriteFile(filepath.Join(it, "policy", "trainer_state.json"), []byte(`{"metrics": {"kl": `+v+`}}`), 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}
		return dir
	}
	s1 := writeIters(t, map[int][]float32{1: {0, 1}, 2: {1, 1}}, map[int]string{1: "0.002", 2: "0.004"})
	s2 := writeIters(t, map[int][]float32{1: {0, 0}}, map[int]string{1: "0.006"})
	one := writeIters(t, map[int][]float32{1: {1, 0}, 2: {0, 0}}, nil)

	mempo, err := ReadSeedCurves("mempo", []string{s1, s2})
	if err != nil {
		t.Fatal(err)
	}
	wantReward := []Spread{{X: 1, Seeds: 2, Mean: 0.25, Min: 0, Max: 0.5}, {X: 2, Seeds: 1, Mean: 1, Min: 1, Max: 1}}
	if diff := cmp.Diff(wantReward, mempo.Reward); diff != "" {
		t.Errorf("reward over seeds (-want +got):\n%s", diff)
	}
	if got := mempo.KL; len(got) != 2 || got[0].Seeds != 2 || math.Abs(got[0].Mean-0.004) > 1e-12 || got[0].Min != 0.002 || got[0].Max != 0.006 {
		t.Errorf("kl over seeds = %+v, want mean 0.004 in [0.002, 0.006] at iteration 1", got)
	}
	grpo, err := ReadSeedCurves("grpo", []string{one})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ReadSeedCurves("x", []string{filepath.Join(s1, "nope")}); err == nil || !strings.Contains(err.Error(), "nope") {
		t.Errorf("ReadSeedCurves(missing dir) = %v, want an error naming it", err)
	}

	out := t.TempDir()
	files, err := WriteCurves(out, []SeedCurves{mempo, grpo})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files[:2] {
		checkPNG(t, filepath.Join(out, f))
	}
	b, err := os.ReadFile(filepath.Join(out, "curves.csv"))
	if err != nil {
		t.Fatal(err)
	}
	want := `name,metric,iter,seeds,mean,lo,hi
mempo,reward,1,2,0.25,0,0.5
mempo,reward,2,1,1,1,1
mempo,kl,1,2,0.004,0.002,0.006
mempo,kl,2,1,0.004,0.004,0.004
grpo,reward,1,1,0.5,0.5,0.5
grpo,reward,2,1,0,0,0
`
	if diff := cmp.Diff(want, string(b)); diff != "" {
		t.Errorf("curves.csv (-want +got):\n%s", diff)
	}
	if s := spreadSeries("mempo", 2, mempo.Reward); !s.Band || s.Label != "mempo (mean of 2 seeds)" || len(s.Lo) != 2 {
		t.Errorf("series of two seeds = %+v, want a band", s)
	}
	if s := spreadSeries("grpo", 1, grpo.Reward); s.Band || s.Lo != nil || s.Label != "grpo" {
		t.Errorf("series of one seed = %+v, want a plain line", s)
	}
}
