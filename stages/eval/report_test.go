package eval

import (
	"encoding/csv"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/mempo/mempo/agent/task"
	"github.com/mempo/mempo/format"
	"github.com/mempo/mempo/format/formattest"
)

// outcomes is a synthetic run: per question (uids q000, q001, …) the F1 of each of its
// trajectories on a single objective; F1 1 is an exact match and a success.
type outcomes [][]float32

// writeRun commits outcomes as policy's run on the K-objective test set in the eval
// directory root, as `mempo eval --out root` lays it out.
func writeRun(t *testing.T, root, policy string, k int, o outcomes) Run {
	t.Helper()
	d := RunDir(root, policy, k)
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	var scores []format.Score
	var rolls []format.Rollout
	for q, trajs := range o {
		uid := fmt.Sprintf("q%03d", q)
		for i, f1 := range trajs {
			em := float32(0)
			if f1 == 1 {
				em = 1
			}
			scores = append(scores, format.Score{UID: uid, Sample: int32(i), F1: []float32{f1}, EM: []float32{em},
				FormatOK: true, Reward: em, TT: int64(100 + q), PT: 50, Turns: 2})
			rolls = append(rolls,
				format.Rollout{UID: uid, Sample: int32(i), Turn: 0, Action: "search", Observation: "Ada was born in 1901."},
				format.Rollout{UID: uid, Sample: int32(i), Turn: 1, Action: "answer", Memory: "Ada " + uid})
		}
	}
	r := Run{Label: policy, K: k, Rollouts: filepath.Join(d, "rollouts"), Scores: filepath.Join(d, "scores")}
	if _, err := formattest.WriteDataset(r.Scores, "test", [][]format.Score{scores}); err != nil {
		t.Fatal(err)
	}
	if _, err := formattest.WriteDataset(r.Rollouts, "test", [][]format.Rollout{rolls}); err != nil {
		t.Fatal(err)
	}
	return r
}

// randomOutcomes draws n questions of one trajectory each with F1 in {0, 0.5, 1}.
func randomOutcomes(rng *rand.Rand, n int) outcomes {
	o := make(outcomes, n)
	for i := range o {
		o[i] = []float32{float32(rng.IntN(3)) / 2}
	}
	return o
}

// shift adds d to every F1, capped at 1.
func shift(o outcomes, d float32) outcomes {
	out := make(outcomes, len(o))
	for i, trajs := range o {
		for _, f := range trajs {
			out[i] = append(out[i], min(f+d, 1))
		}
	}
	return out
}

func report(t *testing.T, seeds []Seed, facts Facts, cfg Config) *Report {
	t.Helper()
	e, err := Collect(seeds, facts)
	if err != nil {
		t.Fatal(err)
	}
	r, err := e.Report(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestReportOneSeedMatchesSummarize(t *testing.T) {
	facts := func(uid string) []task.Hop {
		return map[string][]task.Hop{
			"a": {{Subject: "Ada", Value: "1901"}},
			"b": {{Subject: "Bo", Value: "Acme"}, {Subject: "Cy", Value: "Oslo"}},
		}[uid]
	}
	for name, fix := range map[string]func(*testing.T) Run{"n=1": fixture, "n=2": fixtureN2} {
		t.Run(name, func(t *testing.T) {
			run := fix(t)
			row, err := Summarize(run, facts)
			if err != nil {
				t.Fatal(err)
			}
			rep := report(t, []Seed{{Label: "1", Runs: []Run{run}}}, facts, DefaultConfig())
			got := rep.Results[0]
			want := map[Metric]float64{F1: row.F1, EM: row.EM, Success: row.Success, TT: row.TT, PT: row.PT,
				Turns: row.Turns, Invalid: row.Invalid, Retention: row.Retention}
			for m, w := range want {
				if e := got.Values[m]; math.Abs(e.Mean-w) > 1e-12 || e.Lo > e.Mean || e.Hi < e.Mean {
					t.Errorf("Report %s = %+v, want mean %v (Summarize) inside its interval", m, e, w)
				}
			}
			if got.Seeds != 1 || got.Questions != 2 || got.Diff != nil || rep.Baseline != "" {
				t.Errorf("Report = %+v, baseline %q; want 1 seed, 2 questions, no difference", got, rep.Baseline)
			}
		})
	}
}

func TestReportTable(t *testing.T) {
	rep := report(t, []Seed{{Label: "1", Runs: []Run{fixture(t)}}}, nil, DefaultConfig())
	var md, csvOut strings.Builder
	if err := rep.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	if err := rep.WriteCSV(&csvOut); err != nil {
		t.Fatal(err)
	}
	// The point values of the single-run table before intervals: F1 0.875, EM 0.750,
	// success 0.500, TT 200, PT 50, turns 4.00, invalid 0.200, retention unknown.
	for _, want := range []string{
		"| policy | K | seeds | questions | F1 | EM | success | TT | PT | turns | invalid | retention |",
		"| mempo | 2 | 1 | 2 | 0.875 [0.750, 1.000] | 0.750 [",
		"| 200 [100, 300] | 50 [40, 60] | 4.00 [",
		"| 0.200 [", " | – |",
		"percentile bootstrap over questions (one seed, 1)", "B = 2000 resamples, --seed 1",
	} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("markdown has no %q:\n%s", want, md.String())
		}
	}
	rows, err := csv.NewReader(strings.NewReader(csvOut.String())).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(CSVHeader, rows[0]); diff != "" {
		t.Errorf("csv header (-want +got):\n%s", diff)
	}
	if len(rows) != 1+int(NumMetrics) || !slices.Equal(rows[1][:5], []string{"mempo", "2", "f1", "", "0.875"}) ||
		!slices.Equal(rows[8][2:7], []string{"retention", "", "", "", ""}) {
		t.Errorf("csv rows:\n%s", csvOut.String())
	}
}

func TestReportDeterministic(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	var seeds []Seed
	for _, s := range []string{"1", "2", "3"} {
		dir := t.TempDir()
		seeds = append(seeds, Seed{Label: s, Dir: dir, Runs: []Run{
			writeRun(t, dir, "grpo", 2, randomOutcomes(rng, 20)),
			writeRun(t, dir, "mempo", 2, randomOutcomes(rng, 20)),
		}})
	}
	render := func(cfg Config) string {
		var b strings.Builder
		r := report(t, seeds, nil, cfg)
		if err := r.WriteMarkdown(&b); err != nil {
			t.Fatal(err)
		}
		if err := r.WriteCSV(&b); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	cfg := Config{Resamples: 500, Seed: 3}
	first, again := render(cfg), render(cfg)
	if first != again {
		t.Errorf("two reports with --seed 3 differ (-first +again):\n%s", cmp.Diff(first, again))
	}
	if other := render(Config{Resamples: 500, Seed: 4}); other == first {
		t.Errorf("reports with --seed 3 and --seed 4 are identical, want other resamples")
	}
	if !strings.Contains(first, "over 3 seeds (1, 2, 3) and questions") || !strings.Contains(first, "Difference vs grpo") {
		t.Errorf("report:\n%s", first)
	}
}

func TestReportDifferences(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	tests := []struct {
		name     string
		policy   func(base outcomes) outcomes
		seeds    int
		wantMean float64
		excludes bool // the F1 interval excludes zero
	}{
		{"identical policy, one seed", func(b outcomes) outcomes { return b }, 1, 0, false},
		{"identical policy, three seeds", func(b outcomes) outcomes { return b }, 3, 0, false},
		{"+0.1 on every question", func(b outcomes) outcomes { return shift(b, 0.1) }, 1, 0.1, true},
		{"+0.1 on every question, three seeds", func(b outcomes) outcomes { return shift(b, 0.1) }, 3, 0.1, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var seeds []Seed
			for s := range tt.seeds {
				dir := t.TempDir()
				base := make(outcomes, 30)
				for i := range base {
					base[i] = []float32{float32(rng.IntN(9)) / 10} // below 0.9, so +0.1 is never capped
				}
				seeds = append(seeds, Seed{Label: fmt.Sprint(s + 1), Dir: dir, Runs: []Run{
					writeRun(t, dir, "grpo", 2, base),
					writeRun(t, dir, "other", 2, tt.policy(base)),
				}})
			}
			rep := report(t, seeds, nil, DefaultConfig())
			if rep.Baseline != "grpo" || rep.Results[0].Diff != nil || rep.Results[1].Diff == nil {
				t.Fatalf("Report baseline %q, results %+v; want grpo, a difference for the other policy only", rep.Baseline, rep.Results)
			}
			d := rep.Results[1].Diff
			if tt.wantMean == 0 {
				for m := range NumMetrics {
					if d[m].Known() && d[m] != (Estimate{}) {
						t.Errorf("difference of identical policies: %s = %+v, want exactly 0 [0, 0]", m, d[m])
					}
				}
			}
			got := d[F1]
			if math.Abs(got.Mean-tt.wantMean) > 1e-6 || got.Lo > got.Mean || got.Hi < got.Mean || got.ExcludesZero() != tt.excludes {
				t.Errorf("F1 difference = %+v, want mean %v inside its interval, excludes zero %v", got, tt.wantMean, tt.excludes)
			}
			var md strings.Builder
			if err := rep.WriteMarkdown(&md); err != nil {
				t.Fatal(err)
			}
			if marked := strings.Contains(md.String(), "] *"); marked != tt.excludes {
				t.Errorf("markdown marks a difference: %v, want %v:\n%s", marked, tt.excludes, md.String())
			}
		})
	}
}

func TestBootstrapBernoulli(t *testing.T) {
	// 400 questions, 120 successes: p = 0.3, and the normal 95% interval is
	// 0.3 ± 1.96·sqrt(0.3·0.7/400) = 0.3 ± 0.045.
	o := make(outcomes, 400)
	for i := range o {
		o[i] = []float32{0}
		if i%10 < 3 {
			o[i][0] = 1
		}
	}
	dir := t.TempDir()
	rep := report(t, []Seed{{Label: "1", Dir: dir, Runs: []Run{writeRun(t, dir, "sft", 2, o)}}}, nil, DefaultConfig())
	got := rep.Results[0].Values[Success]
	if width := got.Hi - got.Lo; got.Mean != 0.3 || got.Lo > 0.3 || got.Hi < 0.3 || width < 0.075 || width > 0.105 {
		t.Errorf("success = %+v (width %.4f), want 0.3 inside an interval of width ≈ 0.090", got, got.Hi-got.Lo)
	}

	// Two seeds that disagree: the seed draw widens the interval beyond the questions'.
	dir2 := t.TempDir()
	o2 := make(outcomes, len(o))
	for i := range o2 {
		o2[i] = []float32{0}
		if i%10 < 6 {
			o2[i][0] = 1
		}
	}
	two := report(t, []Seed{
		{Label: "1", Dir: dir, Runs: []Run{{Label: "sft", K: 2, Rollouts: filepath.Join(RunDir(dir, "sft", 2), "rollouts"), Scores: filepath.Join(RunDir(dir, "sft", 2), "scores")}}},
		{Label: "2", Dir: dir2, Runs: []Run{writeRun(t, dir2, "sft", 2, o2)}},
	}, nil, DefaultConfig())
	g := two.Results[0].Values[Success]
	if math.Abs(g.Mean-0.45) > 1e-12 || g.Lo > 0.32 || g.Hi < 0.58 {
		t.Errorf("success over seeds with 0.3 and 0.6 = %+v, want 0.45 with an interval reaching both seeds", g)
	}
}

func TestCollectErrors(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	o := randomOutcomes(rng, 10)
	tests := []struct {
		name     string
		build    func(t *testing.T, d1, d2 string) ([]Seed, []string) // seeds, --policy names
		baseline string
		wantErr  error
		wantIn   []string // substrings of the error; "D1" and "D2" stand for the seed dirs
	}{
		{"policy missing from a seed", func(t *testing.T, d1, d2 string) ([]Seed, []string) {
			writeRun(t, d1, "grpo", 2, o)
			writeRun(t, d1, "mempo", 2, o)
			writeRun(t, d2, "mempo", 2, o)
			return []Seed{{Label: "1", Dir: d1}, {Label: "2", Dir: d2}}, nil
		}, "", ErrMissing, []string{"seed 2", filepath.Join("D2", "grpo", "k2")}},
		{"test set missing from a seed", func(t *testing.T, d1, d2 string) ([]Seed, []string) {
			writeRun(t, d1, "mempo", 2, o)
			writeRun(t, d2, "mempo", 2, o)
			writeRun(t, d2, "mempo", 4, o)
			return []Seed{{Label: "1", Dir: d1}, {Label: "2", Dir: d2}}, nil
		}, "", ErrMissing, []string{"seed 1", filepath.Join("D1", "mempo", "k4")}},
		{"named policy missing", func(t *testing.T, d1, d2 string) ([]Seed, []string) {
			writeRun(t, d1, "mempo", 2, o)
			writeRun(t, d2, "mempo", 2, o)
			writeRun(t, d2, "grpo", 2, o)
			return []Seed{{Label: "1", Dir: d1}, {Label: "2", Dir: d2}}, []string{"mempo", "grpo"}
		}, "", ErrMissing, []string{"seed 1", filepath.Join("D1", "grpo")}},
		{"uids differ between seeds", func(t *testing.T, d1, d2 string) ([]Seed, []string) {
			writeRun(t, d1, "mempo", 2, o)
			writeRun(t, d2, "mempo", 2, o[:8]) // another --limit
			return []Seed{{Label: "1", Dir: d1}, {Label: "2", Dir: d2}}, nil
		}, "", ErrUnpaired, []string{"seed 2", "seed 1", filepath.Join("D1", "mempo", "k2", "scores"),
			filepath.Join("D2", "mempo", "k2", "scores"), "uid q008"}},
		{"uids differ between policies", func(t *testing.T, d1, d2 string) ([]Seed, []string) {
			writeRun(t, d1, "mempo", 2, o)
			writeRun(t, d1, "sft", 2, append(slices.Clone(o), []float32{1}))
			return []Seed{{Label: "1", Dir: d1}}, nil
		}, "", ErrUnpaired, []string{filepath.Join("D1", "mempo", "k2", "scores"), filepath.Join("D1", "sft", "k2", "scores"), "uid q010"}},
		{"unfinished run", func(t *testing.T, d1, d2 string) ([]Seed, []string) {
			writeRun(t, d1, "mempo", 2, o)
			if err := os.MkdirAll(filepath.Join(RunDir(d1, "grpo", 2), "scores"), 0o755); err != nil {
				t.Fatal(err)
			}
			return []Seed{{Label: "1", Dir: d1}}, nil
		}, "", format.ErrNotDataset, []string{"seed 1", filepath.Join("D1", "grpo", "k2", "scores")}},
		{"no runs", func(t *testing.T, d1, d2 string) ([]Seed, []string) {
			return []Seed{{Label: "1", Dir: d1}}, nil
		}, "", ErrMissing, []string{"seed 1", "D1"}},
		{"unknown baseline", func(t *testing.T, d1, d2 string) ([]Seed, []string) {
			writeRun(t, d1, "mempo", 2, o)
			return []Seed{{Label: "1", Dir: d1}}, nil
		}, "ppo", ErrMissing, []string{`baseline "ppo"`, "have mempo"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d1, d2 := t.TempDir(), t.TempDir()
			seeds, names := tt.build(t, d1, d2)
			var err error
			if seeds, err = Discover(seeds, names); err == nil {
				var e *Experiment
				if e, err = Collect(seeds, nil); err == nil {
					_, err = e.Report(Config{Resamples: 10, Baseline: tt.baseline})
				}
			}
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Discover, Collect, Report = %v, want %v", err, tt.wantErr)
			}
			msg := strings.NewReplacer(d1, "D1", d2, "D2").Replace(err.Error())
			for _, w := range tt.wantIn {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not name %q", msg, w)
				}
			}
		})
	}
}

// TestFromSeedDirs is `mempo eval --from 1=D1 --from 2=D2 --out OUT` below the flags:
// discover each seed's cached runs, pair them, report and write the files.
func TestFromSeedDirs(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	var seeds []Seed
	for _, label := range []string{"1", "2"} {
		dir := t.TempDir()
		for _, k := range []int{2, 4} {
			base := randomOutcomes(rng, 12)
			writeRun(t, dir, "grpo", k, base)
			writeRun(t, dir, "mempo", k, shift(base, 0.5))
		}
		if err := os.WriteFile(filepath.Join(dir, "results.md"), []byte("old"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(dir, "plots"), 0o755); err != nil { // not a policy
			t.Fatal(err)
		}
		seeds = append(seeds, Seed{Label: label, Dir: dir})
	}
	seeds, err := Discover(seeds, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := len(seeds[1].Runs); got != 4 {
		t.Fatalf("Discover found %d runs in seed 2, want grpo and mempo on K = 2, 4", got)
	}
	facts := func(string) []task.Hop { return []task.Hop{{Subject: "Ada", Value: "1901"}} }
	rep := report(t, seeds, facts, DefaultConfig())
	out := t.TempDir()
	files, err := WriteReport(out, rep)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"results.md", "results.csv", "f1_vs_k.png", "pt_vs_k.png", "success_vs_k.png", "retention_vs_k.png"}
	if diff := cmp.Diff(want, files); diff != "" {
		t.Errorf("WriteReport files (-want +got):\n%s", diff)
	}
	for _, f := range want[2:] {
		checkPNG(t, filepath.Join(out, f))
	}
	md, err := os.ReadFile(filepath.Join(out, "results.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"| grpo | 2 | 2 | 12 |", "| mempo | 4 | 2 | 12 |", "Difference vs grpo", "| mempo | 2 | +0.", "over 2 seeds (1, 2)"} {
		if !strings.Contains(string(md), w) {
			t.Errorf("results.md has no %q:\n%s", w, md)
		}
	}
	rows, err := csv.NewReader(strings.NewReader(mustRead(t, filepath.Join(out, "results.csv")))).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	// 4 (policy, K) × 8 metrics, and 2 mempo lines × 8 differences.
	if len(rows) != 1+4*8+2*8 {
		t.Errorf("results.csv has %d rows, want %d", len(rows), 1+4*8+2*8)
	}
	for _, r := range rows[1:] {
		if strings.HasPrefix(r[2], "diff_") && (r[0] != "mempo" || r[3] != "grpo") || r[7] != "2" || r[8] != "12" {
			t.Errorf("results.csv row %v: want differences of mempo against grpo, 2 seeds, 12 questions", r)
		}
	}
	// Reported again without the task's facts, retention is unknown: its plot from the
	// first report is removed rather than left beside a table that no longer has it.
	if files, err = WriteReport(out, report(t, seeds, nil, DefaultConfig())); err != nil {
		t.Fatal(err)
	}
	if slices.Contains(files, "retention_vs_k.png") {
		t.Errorf("WriteReport without facts wrote %v, want no retention plot", files)
	}
	if _, err := os.Stat(filepath.Join(out, "retention_vs_k.png")); !os.IsNotExist(err) {
		t.Errorf("stale retention_vs_k.png: Stat = %v, want not exist", err)
	}

	// Only the named policy, in the order named.
	only, err := Discover(seeds, []string{"mempo"})
	if err != nil || len(only[0].Runs) != 2 || only[0].Runs[0].Label != "mempo" {
		t.Errorf("Discover(mempo) = %+v, %v; want mempo's two runs", only, err)
	}
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
