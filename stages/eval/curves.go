package eval

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/mempo/mempo/format"
)

// Curves are a training run's figures per RL iteration.
type Curves struct {
	Reward []Point // mean outcome reward of the iteration's rollouts
	KL     []Point // mean KL to the reference over the iteration's update
}

// RunCurves reads the iterations of a run variant's directory (iter-1, iter-2, …): the
// mean reward from each iter-k/scores dataset and the KL from iter-k/policy's
// trainer_state.json. Missing pieces of an unfinished iteration are skipped.
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
