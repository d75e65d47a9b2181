package eval

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/mempo/mempo/agent/protocol"
	"github.com/mempo/mempo/agent/task"
	"github.com/mempo/mempo/jobs"
)

// ErrConfig marks an evaluation that cannot start as asked: no policy or test set, a
// malformed NAME=DIR, a baseline no run has. `mempo eval` reports it as a usage error.
var ErrConfig = errors.New("invalid eval config")

// Validate checks the report settings.
func (c Config) Validate() error {
	if c.Resamples < 1 {
		return fmt.Errorf("--bootstrap %d: want at least 1 resample: %w", c.Resamples, ErrConfig)
	}
	return nil
}

// Sampling is where an evaluation's rollouts depart from the rollout stage's defaults:
// one greedy trajectory per question (temperature 0), and twice the questions generated
// together, since a test set is rolled out once and not trained on. Every other
// rollout setting (turn budget, tokens per turn) is the rollout stage's default.
type Sampling struct {
	N               int
	Temperature     float64
	PromptsPerShard int
}

// DefaultSampling returns the sampling of `mempo eval`.
func DefaultSampling() Sampling { return Sampling{N: 1, Temperature: 0, PromptsPerShard: 16} }

// Policy is a checkpoint evaluated under a label, with the context policy it runs under.
type Policy struct {
	Name    string
	Dir     string // "" for a policy an earlier evaluation cached (Inputs.From)
	Context protocol.ContextPolicy
}

// ParsePolicy reads NAME=DIR[@CONTEXT], a checkpoint to roll out (context mempo unless
// given), or a bare NAME, a policy an earlier evaluation cached.
func ParsePolicy(s string) (Policy, error) {
	name, rest, ok := strings.Cut(s, "=")
	if !ok {
		if s == "" || strings.ContainsAny(s, "@/") {
			return Policy{}, fmt.Errorf("%q: want NAME=DIR[@CONTEXT], or a bare NAME of a cached policy: %w", s, ErrConfig)
		}
		return Policy{Name: s}, nil
	}
	if name == "" || rest == "" {
		return Policy{}, fmt.Errorf("%q: want NAME=DIR[@CONTEXT]: %w", s, ErrConfig)
	}
	p := Policy{Name: name, Dir: rest, Context: protocol.Mempo}
	if dir, ctx, ok := strings.Cut(rest, "@"); ok {
		c, err := protocol.ParseContextPolicy(ctx)
		if err != nil {
			return Policy{}, fmt.Errorf("%q: %w", s, err)
		}
		p.Dir, p.Context = dir, c
	}
	return p, nil
}

// TestSet is a prompts dataset of K-objective questions.
type TestSet struct {
	K   int
	Dir string
}

// ParseTestSet reads K=DIR.
func ParseTestSet(s string) (TestSet, error) {
	k, dir, ok := strings.Cut(s, "=")
	n, err := strconv.Atoi(k)
	if !ok || err != nil || n < 1 {
		return TestSet{}, fmt.Errorf("%q: want K=DIR with K >= 1: %w", s, ErrConfig)
	}
	return TestSet{K: n, Dir: dir}, nil
}

// ParseSeed reads SEED=DIR: the directory an earlier evaluation of one training seed
// wrote.
func ParseSeed(s string) (Seed, error) {
	label, dir, ok := strings.Cut(s, "=")
	if !ok || label == "" || dir == "" {
		return Seed{}, fmt.Errorf("%q: want SEED=DIR: %w", s, ErrConfig)
	}
	return Seed{Label: label, Dir: dir}, nil
}

// Inputs are what an evaluation reads.
type Inputs struct {
	// Policies are the checkpoints to roll out; with From, bare names choosing and
	// ordering the cached policies to report (all, in name order, when empty).
	Policies []Policy
	// From are earlier evaluations, one per training seed: report their cached runs
	// and roll out nothing.
	From []Seed
	// Task is a task directory: its test sets, and the facts behind each question for
	// the retention figure. Optional.
	Task string
	// Tests are more test sets, besides the task's.
	Tests []TestSet
	// Index is the search index the rollouts use; RetrieverURL a Search-R1 retrieval
	// server they use instead.
	Index, RetrieverURL string
}

// A Job is one policy on one test set: its rollouts, then their scores.
type Job struct {
	Policy  Policy
	K       int
	Prompts string // the test set's prompts dataset
	Index   string // the search index
	// RetrieverURL is the retrieval server searched instead of Index, when set.
	RetrieverURL string
	Rollouts     string // the rollouts dataset to write
	Scores       string // the scores dataset to write
}

// Steps are the two stages behind every job, each a cached stage run writing
// spec.Out. A stage never imports another (DESIGN.md §1), so the command, which may,
// supplies them.
type Steps struct {
	Rollout func(ctx context.Context, j Job, spec jobs.Spec) error
	Score   func(ctx context.Context, j Job, spec jobs.Spec) error
}

// Evaluate rolls every policy of in out on every test set (the task's, then in.Tests)
// and scores it, each job a cached run under spec.Out/<policy>/k<K>/ (RunDir), and
// reports the runs as one seed, spec.Seed, which also seeds the bootstrap. With
// cfg.NoReport it stops after the runs, so that separate processes can evaluate
// policies into one spec.Out and a last call reports them all. With in.From it rolls
// out nothing and reports the cached runs of every seed. The report's files go to
// spec.Out and its tables to spec.Stdout. Mistakes in the invocation are ErrConfig.
func Evaluate(ctx context.Context, cfg Config, in Inputs, spec jobs.Spec, steps Steps) (*Report, error) {
	cfg.Seed = spec.Seed
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var facts Facts
	var sets []TestSet
	if in.Task != "" {
		w, sum, err := task.Load(in.Task)
		if err != nil {
			return nil, err
		}
		facts, sets = TaskFacts(w), taskTestSets(in.Task, sum)
	}
	var seeds []Seed
	var err error
	if len(in.From) > 0 {
		seeds, err = cachedSeeds(cfg, in)
	} else {
		seeds, err = rollOut(ctx, in, append(sets, in.Tests...), spec, steps)
		if err == nil && cfg.NoReport {
			return nil, nil
		}
	}
	if err != nil {
		return nil, err
	}
	return publish(spec, seeds, facts, cfg)
}

// taskTestSets lists the test sets of the task in dir.
func taskTestSets(dir string, sum *task.Summary) []TestSet {
	var sets []TestSet
	for _, d := range sum.Datasets {
		if d.Split == "test" {
			sets = append(sets, TestSet{K: d.K, Dir: filepath.Join(dir, d.Dir)})
		}
	}
	return sets
}

// cachedSeeds finds the runs of in.From to report.
func cachedSeeds(cfg Config, in Inputs) ([]Seed, error) {
	if cfg.NoReport {
		return nil, fmt.Errorf("--no-report with --from: --from only reports: %w", ErrConfig)
	}
	seen := map[string]bool{}
	for _, s := range in.From {
		if seen[s.Label] {
			return nil, fmt.Errorf("--from %s=%s: seed %s given twice: %w", s.Label, s.Dir, s.Label, ErrConfig)
		}
		seen[s.Label] = true
	}
	var names []string
	for _, p := range in.Policies {
		if p.Dir != "" {
			return nil, fmt.Errorf("--policy %s=%s with --from: want a bare NAME of a policy cached in every seed's DIR: %w", p.Name, p.Dir, ErrConfig)
		}
		names = append(names, p.Name)
	}
	return Discover(in.From, names)
}

// rollOut runs every job of in on sets and returns them as the one seed spec.Seed.
func rollOut(ctx context.Context, in Inputs, sets []TestSet, spec jobs.Spec, steps Steps) ([]Seed, error) {
	if len(in.Policies) == 0 {
		return nil, fmt.Errorf("no policies: give --policy NAME=DIR, or --from SEED=DIR to report earlier runs: %w", ErrConfig)
	}
	for _, p := range in.Policies {
		if p.Dir == "" {
			return nil, fmt.Errorf("--policy %s: want NAME=DIR[@CONTEXT] to roll out (a bare NAME reports a cached policy, with --from): %w", p.Name, ErrConfig)
		}
	}
	if in.Index == "" && in.RetrieverURL == "" {
		return nil, fmt.Errorf("--index or --retriever-url is required to roll out (or --from SEED=DIR to report earlier runs): %w", ErrConfig)
	}
	if len(sets) == 0 {
		return nil, fmt.Errorf("no test sets: give --task or --test K=DIR: %w", ErrConfig)
	}
	var runs []Run
	for _, p := range in.Policies {
		for _, set := range sets {
			dir := RunDir(spec.Out, p.Name, set.K)
			j := Job{Policy: p, K: set.K, Prompts: set.Dir, Index: in.Index, RetrieverURL: in.RetrieverURL,
				Rollouts: filepath.Join(dir, "rollouts"), Scores: filepath.Join(dir, "scores")}
			if err := runJob(ctx, j, spec, steps); err != nil {
				return nil, fmt.Errorf("eval %s on K=%d: %w", p.Name, set.K, err)
			}
			runs = append(runs, Run{Label: p.Name, K: set.K, Rollouts: j.Rollouts, Scores: j.Scores})
		}
	}
	return []Seed{{Label: strconv.FormatInt(spec.Seed, 10), Dir: spec.Out, Runs: runs}}, nil
}

// runJob rolls a job's policy out and scores the rollouts, each step a stage run of
// its own under the evaluation's runtime settings.
func runJob(ctx context.Context, j Job, spec jobs.Spec, steps Steps) error {
	spec.Out = j.Rollouts
	if err := steps.Rollout(ctx, j, spec); err != nil {
		return err
	}
	spec.Out = j.Scores
	return steps.Score(ctx, j, spec)
}

// publish pairs the seeds' runs, bootstraps them, writes the report files into
// spec.Out and prints the tables to spec.Stdout.
func publish(spec jobs.Spec, seeds []Seed, facts Facts, cfg Config) (*Report, error) {
	exp, err := Collect(seeds, facts)
	if err != nil {
		return nil, err
	}
	rep, err := exp.Report(cfg)
	if err != nil {
		if errors.Is(err, ErrMissing) && cfg.Baseline != "" {
			return nil, fmt.Errorf("%w: %w", err, ErrConfig) // --baseline names no policy
		}
		return nil, err
	}
	files, err := WriteReport(spec.Out, rep)
	if err != nil {
		return nil, err
	}
	w := spec.Stdout
	if w == nil {
		w = io.Discard
	}
	if err := rep.WriteMarkdown(w); err != nil {
		return nil, err
	}
	fmt.Fprintf(w, "\nwrote %s/%s\n", spec.Out, strings.Join(files, ", "))
	return rep, nil
}
