package eval

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

var (
	// ErrMissing marks a policy or test set that one seed's eval directory lacks.
	ErrMissing = errors.New("missing run")
	// ErrUnpaired marks runs of one test set that did not answer the same questions, so
	// they cannot be compared question by question.
	ErrUnpaired = errors.New("question sets differ")
)

// Seed is what one training seed contributes to an experiment: its evaluation runs,
// every (policy, test set) of the experiment, as one `mempo eval --out Dir` wrote them.
type Seed struct {
	Label string // names the seed in reports and errors: the SEED of --from SEED=DIR
	Dir   string // the eval --out directory, laid out <policy>/k<K>/{rollouts,scores}
	Runs  []Run
}

// RunDir is where eval caches policy's run on the K-objective test set under dir.
func RunDir(dir, policy string, k int) string {
	return filepath.Join(dir, policy, "k"+strconv.Itoa(k))
}

// Discover fills in each seed's Runs from its Dir: every policy directory holding
// k<K> runs, in name order, or only the named policies, in the order named; each
// policy's test sets by K ascending. A named policy a seed lacks is ErrMissing naming
// the seed and the path. Whether every seed holds the same runs is Collect's check.
func Discover(seeds []Seed, policies []string) ([]Seed, error) {
	out := slices.Clone(seeds)
	for i := range out {
		s := &out[i]
		names := policies
		if len(names) == 0 {
			entries, err := os.ReadDir(s.Dir)
			if err != nil {
				return nil, fmt.Errorf("seed %s: %w", s.Label, err)
			}
			for _, e := range entries {
				if e.IsDir() && !strings.HasPrefix(e.Name(), ".") {
					names = append(names, e.Name())
				}
			}
		}
		s.Runs = nil
		for _, name := range names {
			ks, err := testSetsIn(filepath.Join(s.Dir, name))
			if err != nil {
				return nil, fmt.Errorf("seed %s: %w", s.Label, err)
			}
			if len(ks) == 0 {
				if len(policies) > 0 {
					return nil, fmt.Errorf("seed %s: policy %s: no k<K> runs in %s: %w", s.Label, name, filepath.Join(s.Dir, name), ErrMissing)
				}
				continue // not a policy: some other directory beside the runs
			}
			for _, k := range ks {
				d := RunDir(s.Dir, name, k)
				s.Runs = append(s.Runs, Run{Label: name, K: k, Rollouts: filepath.Join(d, "rollouts"), Scores: filepath.Join(d, "scores")})
			}
		}
		if len(s.Runs) == 0 {
			return nil, fmt.Errorf("seed %s: no runs in %s (want <policy>/k<K>/{rollouts,scores}): %w", s.Label, s.Dir, ErrMissing)
		}
	}
	return out, nil
}

// testSetsIn lists the K of the k<K> directories in a policy's directory, ascending; a
// missing directory has none.
func testSetsIn(dir string) ([]int, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var ks []int
	for _, e := range entries {
		k, err := strconv.Atoi(strings.TrimPrefix(e.Name(), "k"))
		if e.IsDir() && strings.HasPrefix(e.Name(), "k") && err == nil && k >= 1 {
			ks = append(ks, k)
		}
	}
	slices.Sort(ks)
	return ks, nil
}

// Experiment is every run's per-question figures, checked to pair: every seed holds the
// same (policy, K) runs, and on each test set every seed and policy answered the same
// questions, so that seeds and questions can be resampled together (Report).
type Experiment struct {
	seeds  []string
	order  []runKey // (policy, K) in report order: the first seed's run order
	groups []*group // one per test set, K ascending
}

type runKey struct {
	policy string
	k      int
}

// group is one test set's runs.
type group struct {
	k        int
	uids     []string
	policies []string
	q        [][][]Question // [policy][seed][question], questions in uids order
}

// Collect reads the per-question figures of every run of every seed. A (policy, K) run
// that some seed lacks is ErrMissing naming the seed and the path; runs of one K over
// different questions are ErrUnpaired naming both.
func Collect(seeds []Seed, facts Facts) (*Experiment, error) {
	if len(seeds) == 0 {
		return nil, fmt.Errorf("eval: no seeds to report: %w", ErrMissing)
	}
	e := &Experiment{}
	labels := map[string]bool{}
	for _, s := range seeds {
		if labels[s.Label] {
			return nil, fmt.Errorf("eval: seed %q given twice", s.Label)
		}
		labels[s.Label] = true
		e.seeds = append(e.seeds, s.Label)
	}
	byKey := make([]map[runKey]Run, len(seeds))
	for i, s := range seeds {
		byKey[i] = map[runKey]Run{}
		for _, r := range s.Runs {
			key := runKey{r.Label, r.K}
			if _, dup := byKey[i][key]; dup {
				return nil, fmt.Errorf("eval: seed %s: policy %s on K=%d given twice", s.Label, r.Label, r.K)
			}
			byKey[i][key] = r
			if i == 0 {
				e.order = append(e.order, key)
			}
		}
	}
	for i, s := range seeds {
		for _, key := range e.order {
			if _, ok := byKey[i][key]; !ok {
				return nil, fmt.Errorf("eval: seed %s has no run of policy %s on K=%d (seed %s has): %s: %w",
					s.Label, key.policy, key.k, seeds[0].Label, RunDir(s.Dir, key.policy, key.k), ErrMissing)
			}
		}
		for _, r := range s.Runs {
			if _, ok := byKey[0][runKey{r.Label, r.K}]; !ok {
				return nil, fmt.Errorf("eval: seed %s has no run of policy %s on K=%d (seed %s has): %s: %w",
					seeds[0].Label, r.Label, r.K, s.Label, RunDir(seeds[0].Dir, r.Label, r.K), ErrMissing)
			}
		}
	}

	groups := map[int]*group{}
	first := map[int]Run{} // the run (of seed 0) each group's uids come from, for errors
	for _, key := range e.order {
		g := groups[key.k]
		if g == nil {
			g = &group{k: key.k}
			groups[key.k] = g
			e.groups = append(e.groups, g)
		}
		g.policies = append(g.policies, key.policy)
		perSeed := make([][]Question, len(seeds))
		for i, s := range seeds {
			r := byKey[i][key]
			qs, err := Questions(r, facts)
			if err != nil {
				return nil, fmt.Errorf("seed %s: %w", s.Label, err)
			}
			if g.uids == nil {
				g.uids = uidsOf(qs)
				first[key.k] = r
			} else if err := samePrompts(g.uids, qs); err != nil {
				f := first[key.k]
				return nil, fmt.Errorf("eval K=%d: seed %s policy %s (%s) and seed %s policy %s (%s): %w: %w",
					key.k, s.Label, r.Label, r.Scores, seeds[0].Label, f.Label, f.Scores, err, ErrUnpaired)
			}
			perSeed[i] = qs
		}
		g.q = append(g.q, perSeed)
	}
	slices.SortFunc(e.groups, func(a, b *group) int { return a.k - b.k })
	return e, nil
}

func uidsOf(qs []Question) []string {
	uids := make([]string, len(qs))
	for i, q := range qs {
		uids[i] = q.UID
	}
	return uids
}

// samePrompts checks that qs (sorted by uid) are exactly the questions uids names.
func samePrompts(uids []string, qs []Question) error {
	i, j := 0, 0
	for i < len(uids) && j < len(qs) && uids[i] == qs[j].UID {
		i, j = i+1, j+1
	}
	switch {
	case i == len(uids) && j == len(qs):
		return nil
	case j == len(qs) || (i < len(uids) && uids[i] < qs[j].UID):
		return fmt.Errorf("%d questions and %d: uid %s only in the second", len(qs), len(uids), uids[i])
	default:
		return fmt.Errorf("%d questions and %d: uid %s only in the first", len(qs), len(uids), qs[j].UID)
	}
}
