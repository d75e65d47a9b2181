package eval

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/mempo/mempo/agent/protocol"
	"github.com/mempo/mempo/jobs"
)

// fakeSteps stands for the rollout and score stages: it records every step's job and
// output, and the score step writes the job's run as writeRun lays it out.
type fakeSteps struct {
	jobs []Job
	outs []string
}

func (f *fakeSteps) steps(t *testing.T, root string) Steps {
	return Steps{
		Rollout: func(_ context.Context, j Job, spec jobs.Spec) error {
			f.jobs, f.outs = append(f.jobs, j), append(f.outs, spec.Out)
			return nil
		},
		Score: func(_ context.Context, j Job, spec jobs.Spec) error {
			f.outs = append(f.outs, spec.Out)
			writeRun(t, root, j.Policy.Name, j.K, outcomes{{1}, {0.5}, {0}})
			return nil
		},
	}
}

// noSteps fails a test that rolls anything out.
func noSteps(t *testing.T) Steps {
	fail := func(context.Context, Job, jobs.Spec) error {
		t.Error("a step ran; want nothing rolled out")
		return nil
	}
	return Steps{Rollout: fail, Score: fail}
}

func TestEvaluateRollsOutThenReports(t *testing.T) {
	root := t.TempDir()
	in := Inputs{
		Policies: []Policy{{Name: "grpo", Dir: "/ckpt/grpo", Context: protocol.Mempo}, {Name: "full", Dir: "/ckpt/sft", Context: protocol.Full}},
		Tests:    []TestSet{{K: 2, Dir: "/prompts/k2"}, {K: 4, Dir: "/prompts/k4"}},
		Index:    "/index",
	}
	var stdout strings.Builder
	var f fakeSteps
	rep, err := Evaluate(context.Background(), Config{Resamples: 50}, in, jobs.Spec{Out: root, Seed: 5, Stdout: &stdout}, f.steps(t, root))
	if err != nil {
		t.Fatal(err)
	}
	job := func(p Policy, k int, prompts string) Job {
		d := RunDir(root, p.Name, k)
		return Job{Policy: p, K: k, Prompts: prompts, Index: "/index", Rollouts: filepath.Join(d, "rollouts"), Scores: filepath.Join(d, "scores")}
	}
	wantJobs := []Job{
		job(in.Policies[0], 2, "/prompts/k2"), job(in.Policies[0], 4, "/prompts/k4"),
		job(in.Policies[1], 2, "/prompts/k2"), job(in.Policies[1], 4, "/prompts/k4"),
	}
	if diff := cmp.Diff(wantJobs, f.jobs); diff != "" {
		t.Errorf("jobs (-want +got):\n%s", diff)
	}
	var wantOuts []string
	for _, j := range wantJobs {
		wantOuts = append(wantOuts, j.Rollouts, j.Scores)
	}
	if diff := cmp.Diff(wantOuts, f.outs); diff != "" {
		t.Errorf("step outputs (-want +got):\n%s", diff)
	}

	// One seed, labelled by spec.Seed, which also seeds the bootstrap; grpo is the
	// baseline by default.
	if rep.Seed != 5 || !cmp.Equal(rep.Seeds, []string{"5"}) || rep.Baseline != "grpo" || len(rep.Results) != 4 {
		t.Errorf("report seed %d seeds %v baseline %q results %d; want 5 [5] grpo 4", rep.Seed, rep.Seeds, rep.Baseline, len(rep.Results))
	}
	var table strings.Builder
	if err := rep.WriteMarkdown(&table); err != nil {
		t.Fatal(err)
	}
	if got := mustRead(t, filepath.Join(root, "results.md")); got != table.String() {
		t.Errorf("results.md = %q, want the report's table %q", got, table.String())
	}
	wantOut := table.String() + "\nwrote " + root + "/results.md, results.csv, f1_vs_k.png, pt_vs_k.png, success_vs_k.png\n"
	if stdout.String() != wantOut {
		t.Errorf("stdout = %q, want %q", stdout.String(), wantOut)
	}

	// The cached runs report again from the directory, without rolling out.
	from, err := Evaluate(context.Background(), Config{Resamples: 50}, Inputs{From: []Seed{{Label: "5", Dir: root}},
		Policies: []Policy{{Name: "grpo"}, {Name: "full"}}}, jobs.Spec{Out: t.TempDir(), Seed: 5}, noSteps(t))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(rep, from, cmpopts.EquateNaNs()); diff != "" {
		t.Errorf("report --from the cached runs (-rolled out +from):\n%s", diff)
	}
}

func TestEvaluateNoReport(t *testing.T) {
	root := t.TempDir()
	in := Inputs{Policies: []Policy{{Name: "sft", Dir: "/ckpt", Context: protocol.Mempo}}, Tests: []TestSet{{K: 2, Dir: "/p"}}, Index: "/i"}
	var f fakeSteps
	rep, err := Evaluate(context.Background(), Config{Resamples: 10, NoReport: true}, in, jobs.Spec{Out: root}, f.steps(t, root))
	if err != nil || rep != nil || len(f.jobs) != 1 {
		t.Fatalf("Evaluate with NoReport = %v, %v after %d jobs; want no report after 1 job", rep, err, len(f.jobs))
	}
	if _, err := os.Stat(filepath.Join(root, "results.md")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("results.md with NoReport: %v, want none", err)
	}
}

func TestEvaluateConfigErrors(t *testing.T) {
	cached := t.TempDir()
	writeRun(t, cached, "grpo", 2, outcomes{{1}, {0}})
	roll := Inputs{Policies: []Policy{{Name: "a", Dir: "/a", Context: protocol.Mempo}}, Tests: []TestSet{{K: 2, Dir: "/p"}}, Index: "/i"}
	tests := []struct {
		name string
		cfg  Config
		in   func(in *Inputs)
		msg  string
	}{
		{"no resamples", Config{}, func(*Inputs) {}, "--bootstrap 0"},
		{"no policies", Config{Resamples: 1}, func(in *Inputs) { in.Policies = nil }, "no policies"},
		{"bare name to roll out", Config{Resamples: 1}, func(in *Inputs) { in.Policies = []Policy{{Name: "a"}} }, "--policy a: want NAME=DIR"},
		{"no index", Config{Resamples: 1}, func(in *Inputs) { in.Index = "" }, "--index or --retriever-url is required"},
		{"no test sets", Config{Resamples: 1}, func(in *Inputs) { in.Tests = nil }, "no test sets"},
		{"no report from cache", Config{Resamples: 1, NoReport: true}, func(in *Inputs) { *in = Inputs{From: []Seed{{Label: "1", Dir: cached}}} }, "--no-report with --from"},
		{"seed twice", Config{Resamples: 1}, func(in *Inputs) { *in = Inputs{From: []Seed{{Label: "1", Dir: cached}, {Label: "1", Dir: cached}}} }, "seed 1 given twice"},
		{"checkpoint with cache", Config{Resamples: 1}, func(in *Inputs) { in.From = []Seed{{Label: "1", Dir: cached}} }, "--policy a=/a with --from"},
		{"unknown baseline", Config{Resamples: 1, Baseline: "ppo"}, func(in *Inputs) { *in = Inputs{From: []Seed{{Label: "1", Dir: cached}}} }, `baseline "ppo"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := roll
			tt.in(&in)
			_, err := Evaluate(context.Background(), tt.cfg, in, jobs.Spec{Out: t.TempDir()}, noSteps(t))
			if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("Evaluate = %v, want ErrConfig naming %q", err, tt.msg)
			}
		})
	}
}

func TestParse(t *testing.T) {
	tests := []struct {
		s    string
		want any
	}{
		{"grpo=/ckpt/g", Policy{Name: "grpo", Dir: "/ckpt/g", Context: protocol.Mempo}},
		{"full=/ckpt/s@full", Policy{Name: "full", Dir: "/ckpt/s", Context: protocol.Full}},
		{"grpo", Policy{Name: "grpo"}},
		{"=/ckpt", nil},
		{"a=", nil},
		{"a=/c@wide", nil},
		{"a/b", nil},
		{"", nil},
	}
	for _, tt := range tests {
		got, err := ParsePolicy(tt.s)
		if tt.want == nil {
			if !errors.Is(err, ErrConfig) && !errors.Is(err, protocol.ErrContextPolicy) {
				t.Errorf("ParsePolicy(%q) = %v, %v; want an error", tt.s, got, err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ParsePolicy(%q) = %v, %v; want %v", tt.s, got, err, tt.want)
		}
	}
	if got, err := ParseTestSet("4=/p"); err != nil || got != (TestSet{K: 4, Dir: "/p"}) {
		t.Errorf("ParseTestSet(4=/p) = %v, %v", got, err)
	}
	for _, s := range []string{"0=/p", "x=/p", "/p"} {
		if _, err := ParseTestSet(s); !errors.Is(err, ErrConfig) {
			t.Errorf("ParseTestSet(%q) = %v, want ErrConfig", s, err)
		}
	}
	if got, err := ParseSeed("1=/e"); err != nil || got.Label != "1" || got.Dir != "/e" {
		t.Errorf("ParseSeed(1=/e) = %v, %v", got, err)
	}
	for _, s := range []string{"1=", "=/e", "1"} {
		if _, err := ParseSeed(s); !errors.Is(err, ErrConfig) {
			t.Errorf("ParseSeed(%q) = %v, want ErrConfig", s, err)
		}
	}
}

func TestReadVariantsRefusesADirTwice(t *testing.T) {
	if got, err := ParseVariantRun("mempo=/runs/s1"); err != nil || got != (VariantRun{Name: "mempo", Dir: "/runs/s1"}) {
		t.Errorf("ParseVariantRun(mempo=/runs/s1) = %v, %v", got, err)
	}
	for _, s := range []string{"mempo", "=/r", "mempo="} {
		if _, err := ParseVariantRun(s); !errors.Is(err, ErrConfig) {
			t.Errorf("ParseVariantRun(%q) = %v, want ErrConfig", s, err)
		}
	}
	runs := []VariantRun{{"mempo", "/r/1"}, {"grpo", "/r/2"}, {"mempo", "/r/1"}}
	if _, err := ReadVariants(runs); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "/r/1 given twice for mempo") {
		t.Errorf("ReadVariants with a directory twice = %v, want ErrConfig naming it", err)
	}
}

// TestEvaluateRetrieverURL: without an index, a retrieval server's URL reaches every
// job's rollout.
func TestEvaluateRetrieverURL(t *testing.T) {
	root := t.TempDir()
	in := Inputs{Policies: []Policy{{Name: "a", Dir: "/a", Context: protocol.Mempo}}, Tests: []TestSet{{K: 1, Dir: "/p"}},
		RetrieverURL: "http://127.0.0.1:8000/retrieve"}
	var f fakeSteps
	if _, err := Evaluate(context.Background(), Config{Resamples: 10, NoReport: true}, in, jobs.Spec{Out: root}, f.steps(t, root)); err != nil {
		t.Fatal(err)
	}
	if len(f.jobs) != 1 || f.jobs[0].RetrieverURL != in.RetrieverURL || f.jobs[0].Index != "" {
		t.Errorf("jobs %+v, want one searching %s", f.jobs, in.RetrieverURL)
	}
}
