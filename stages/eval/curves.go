package eval

import (
	"cmp"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/mempo/mempo/format"
	"github.com/mempo/mempo/internal/renameio"
)

// Curves are a training run's figures per RL iteration.
type Curves struct {
	Reward []Point // mean outcome reward of the iteration's rollouts
	KL     []Point // mean KL to the reference over the iteration's update
	// ZeroSpread is the fraction of the iteration's groups whose rewards are all equal:
	// the questions that carry no outcome signal (the advantages' zero_spread_group_frac).
	ZeroSpread []Point
	// Invalid is the fraction of the iteration's rollout turns that left the turn format.
	Invalid []Point
}

// RunCurves reads the iterations of a run variant's directory (iter-1, iter-2, …): the
// mean reward from each iter-k/scores dataset, the KL from iter-k/policy's
// trainer_state.json, the groups without reward spread from iter-k/advantages' manifest
// and the invalid turns from iter-k/rollouts'. Missing pieces of an unfinished iteration
// are skipped.
func RunCurves(dir string) (Curves, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return Curves{}, fmt.Errorf("curves %s: %w", dir, err)
	}
	var iters []int
	for _, e := range entries {
		if k, err := strconv.Atoi(strings.TrimPrefix(e.Name(), "iter-")); err == nil && e.IsDir() && strings.HasPrefix(e.Name(), "iter-") {
			iters = append(iters, k)
		}
	}
	sort.Ints(iters)
	var c Curves
	for _, k := range iters {
		it := filepath.Join(dir, fmt.Sprintf("iter-%d", k))
		if scores, err := format.ReadDataset[format.Score](filepath.Join(it, "scores")); err == nil && len(scores) > 0 {
			sum := 0.0
			for _, s := range scores {
				sum += float64(s.Reward)
			}
			c.Reward = append(c.Reward, Point{X: float64(k), Y: sum / float64(len(scores))})
		}
		if kl, ok := trainerMetric(filepath.Join(it, "policy", "trainer_state.json"), "kl"); ok {
			c.KL = append(c.KL, Point{X: float64(k), Y: kl})
		}
		if m, err := format.ReadManifest(filepath.Join(it, "advantages")); err == nil {
			if f, ok := m.Metrics["zero_spread_group_frac"]; ok {
				c.ZeroSpread = append(c.ZeroSpread, Point{X: float64(k), Y: f})
			}
		}
		if m, err := format.ReadManifest(filepath.Join(it, "rollouts")); err == nil && m.Metrics["rows"] > 0 {
			c.Invalid = append(c.Invalid, Point{X: float64(k), Y: m.Metrics["invalid_turns"] / m.Metrics["rows"]})
		}
	}
	return c, nil
}

// trainerMetric reads one summary metric of a checkpoint's trainer_state.json.
func trainerMetric(path, name string) (float64, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	var st struct {
		Metrics map[string]float64 `json:"metrics"`
	}
	if json.Unmarshal(b, &st) != nil {
		return 0, false
	}
	v, ok := st.Metrics[name]
	return v, ok
}

// Spread is one iteration of a curve over several seeds' runs.
type Spread struct {
	X        float64
	Seeds    int // runs that reached this iteration
	Mean     float64
	Min, Max float64
}

// SpreadOf aggregates curves, one per seed, point by point: at each x, the mean, min and
// max over the curves that have it, x ascending. An unfinished run counts only for the
// iterations it reached.
func SpreadOf(curves [][]Point) []Spread {
	at := map[float64]*Spread{}
	var out []Spread
	for _, c := range curves {
		for _, p := range c {
			s := at[p.X]
			if s == nil {
				s = &Spread{X: p.X, Min: p.Y, Max: p.Y}
				at[p.X] = s
			}
			s.Seeds++
			s.Mean += p.Y
			s.Min, s.Max = min(s.Min, p.Y), max(s.Max, p.Y)
		}
	}
	for _, s := range at {
		s.Mean /= float64(s.Seeds)
		out = append(out, *s)
	}
	slices.SortFunc(out, func(a, b Spread) int { return cmp.Compare(a.X, b.X) })
	return out
}

// SeedCurves is one run variant's curves over its seeds' run directories.
type SeedCurves struct {
	Name                            string
	Dirs                            []string
	Reward, KL, ZeroSpread, Invalid []Spread
}

// ReadSeedCurves reads the curves of each of a variant's run directories (RunCurves),
// one per seed, and aggregates them (SpreadOf).
func ReadSeedCurves(name string, dirs []string) (SeedCurves, error) {
	sc := SeedCurves{Name: name, Dirs: dirs}
	var reward, kl, zero, invalid [][]Point
	for _, d := range dirs {
		c, err := RunCurves(d)
		if err != nil {
			return sc, fmt.Errorf("curves %s: %w", name, err)
		}
		reward, kl = append(reward, c.Reward), append(kl, c.KL)
		zero, invalid = append(zero, c.ZeroSpread), append(invalid, c.Invalid)
	}
	sc.Reward, sc.KL, sc.ZeroSpread, sc.Invalid = SpreadOf(reward), SpreadOf(kl), SpreadOf(zero), SpreadOf(invalid)
	return sc, nil
}

// VariantRun is one training seed's run directory of a run variant (NAME=DIR).
type VariantRun struct{ Name, Dir string }

// ParseVariantRun reads NAME=DIR.
func ParseVariantRun(s string) (VariantRun, error) {
	name, dir, ok := strings.Cut(s, "=")
	if !ok || name == "" || dir == "" {
		return VariantRun{}, fmt.Errorf("%q: want NAME=DIR: %w", s, ErrConfig)
	}
	return VariantRun{Name: name, Dir: dir}, nil
}

// ReadVariants reads the curves of each variant of runs, a variant named once per
// seed, in order of first appearance (ReadSeedCurves). A directory given twice for a
// variant is ErrConfig: it would count one seed twice.
func ReadVariants(runs []VariantRun) ([]SeedCurves, error) {
	var names []string
	dirs := map[string][]string{}
	for _, r := range runs {
		if slices.Contains(dirs[r.Name], r.Dir) {
			return nil, fmt.Errorf("--run %s=%s: %s given twice for %s: %w", r.Name, r.Dir, r.Dir, r.Name, ErrConfig)
		}
		if dirs[r.Name] == nil {
			names = append(names, r.Name)
		}
		dirs[r.Name] = append(dirs[r.Name], r.Dir)
	}
	var curves []SeedCurves
	for _, name := range names {
		sc, err := ReadSeedCurves(name, dirs[name])
		if err != nil {
			return nil, err
		}
		curves = append(curves, sc)
	}
	return curves, nil
}

// spreadSeries is a variant's series: a plain line for one seed, the mean with a
// min–max band for several.
func spreadSeries(name string, seeds int, sp []Spread) Series {
	s := Series{Label: name}
	for _, p := range sp {
		s.Points = append(s.Points, Point{X: p.X, Y: p.Mean})
	}
	if seeds > 1 {
		s.Label = fmt.Sprintf("%s (mean of %d seeds)", name, seeds)
		s.Band = true
		s.Lo, s.Hi = []float64{}, []float64{}
		for _, p := range sp {
			s.Lo, s.Hi = append(s.Lo, p.Min), append(s.Hi, p.Max)
		}
	}
	return s
}

// CurvesCSVHeader is curves.csv's header: one row per (variant, metric, iteration),
// metric reward, kl, zero_spread or invalid (curveMetrics); mean over the seeds that
// reached the iteration, lo and hi their min and max.
var CurvesCSVHeader = []string{"name", "metric", "iter", "seeds", "mean", "lo", "hi"}

// curveMetric is one curve of SeedCurves, its CSV name and its plot. An optional curve
// no variant has (runs from before its figure existed) gets no plot; the others always
// get one.
type curveMetric struct {
	name, file, title, y string
	optional             bool
	of                   func(SeedCurves) []Spread
}

var curveMetrics = []curveMetric{
	{"reward", "reward_vs_iter.png", "Mean reward per RL iteration", "reward", false, func(c SeedCurves) []Spread { return c.Reward }},
	{"kl", "kl_vs_iter.png", "KL to the reference per RL iteration", "KL", false, func(c SeedCurves) []Spread { return c.KL }},
	{"zero_spread", "zero_spread_vs_iter.png", "Groups without reward spread (no outcome signal)", "fraction of groups", true, func(c SeedCurves) []Spread { return c.ZeroSpread }},
	{"invalid", "invalid_vs_iter.png", "Invalid turns of the iteration's rollouts", "fraction of turns", true, func(c SeedCurves) []Spread { return c.Invalid }},
}

// WriteCurves writes a plot per curve (reward_vs_iter.png, kl_vs_iter.png,
// zero_spread_vs_iter.png, invalid_vs_iter.png) and curves.csv (atomically) into dir and
// returns the names of the files it wrote. A variant with several seeds is drawn as its
// mean with a shaded band from the min to the max over seeds.
func WriteCurves(dir string, cs []SeedCurves) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("curves: %w", err)
	}
	var b strings.Builder
	w := csv.NewWriter(&b)
	w.Write(CurvesCSVHeader)
	num := func(x float64) string { return strconv.FormatFloat(x, 'g', 6, 64) }
	band := ""
	for _, c := range cs {
		if len(c.Dirs) > 1 {
			band = " (band: min–max over seeds)"
		}
	}
	for _, c := range cs {
		for _, m := range curveMetrics {
			for _, p := range m.of(c) {
				w.Write([]string{c.Name, m.name, num(p.X), strconv.Itoa(p.Seeds), num(p.Mean), num(p.Min), num(p.Max)})
			}
		}
	}
	var files []string
	for _, m := range curveMetrics {
		var series []Series
		points := 0
		for _, c := range cs {
			points += len(m.of(c))
			series = append(series, spreadSeries(c.Name, len(c.Dirs), m.of(c)))
		}
		if points == 0 && m.optional {
			continue
		}
		if err := PlotPNG(filepath.Join(dir, m.file), m.title+band, "iteration", m.y, series); err != nil {
			return nil, err
		}
		files = append(files, m.file)
	}
	w.Flush()
	if err := w.Error(); err != nil {
		return nil, fmt.Errorf("curves: %w", err)
	}
	if err := renameio.WriteFile(filepath.Join(dir, "curves.csv"), []byte(b.String())); err != nil {
		return nil, err
	}
	return append(files, "curves.csv"), nil
}
