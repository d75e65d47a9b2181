package score

import (
	"context"
	"errors"
	"math"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/mempo/mempo/format"
	"github.com/mempo/mempo/format/formattest"
	"github.com/mempo/mempo/jobs"
)

func turnRow(uid string, sample, turn int32, response string, prompt, resp int) format.Rollout {
	return format.Rollout{UID: uid, Sample: sample, Turn: turn, Response: response,
		PromptIDs: make([]int32, prompt), ResponseIDs: make([]int32, resp)}
}

func TestRun(t *testing.T) {
	dir := t.TempDir()
	prompts := [][]format.Prompt{{
		{UID: "q1", Question: "a; b", Golds: [][]string{{"Paris"}, {"1901", "nineteen oh one"}}},
		{UID: "q2", Question: "c; d", Golds: [][]string{{"Oslo"}, {"Rome"}}},
	}}
	rolls := [][]format.Rollout{
		{ // shard 0: q1, two samples
			turnRow("q1", 0, 0, "<mem>m</mem><think>t</think><search>x</search>", 10, 5),
			turnRow("q1", 0, 1, "<mem>m</mem><think>t</think><answer>paris; 1901</answer>", 12, 7),
			turnRow("q1", 1, 0, "<mem>m</mem><think>t</think><answer>Paris; 1902</answer>", 10, 6),
		},
		{ // shard 1: q2, one sample that never answers
			turnRow("q2", 0, 0, "<mem>m</mem><think>t</think><search>y</search>", 8, 4),
		},
	}
	if _, err := formattest.WriteDataset(filepath.Join(dir, "prompts"), "test", prompts); err != nil {
		t.Fatal(err)
	}
	if _, err := formattest.WriteDataset(filepath.Join(dir, "rollouts"), "test", rolls); err != nil {
		t.Fatal(err)
	}
	in := Inputs{Rollouts: filepath.Join(dir, "rollouts"), Prompts: filepath.Join(dir, "prompts")}
	out := filepath.Join(dir, "scores")
	res, err := Run(context.Background(), DefaultConfig(), in, jobs.Spec{Out: out})
	if err != nil {
		t.Fatal(err)
	}
	if res.Hit || res.Manifest.Rows() != 3 || len(res.Manifest.Outputs) != 2 {
		t.Fatalf("Run = hit %v, %d rows in %d shards; want a fresh run, 3 rows in 2 shards",
			res.Hit, res.Manifest.Rows(), len(res.Manifest.Outputs))
	}
	d, err := format.OpenDataset(out)
	if err != nil {
		t.Fatal(err)
	}
	r, err := format.OpenShards[format.Score](d)
	if err != nil {
		t.Fatal(err)
	}
	got, err := format.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	want := []format.Score{
		{UID: "q1", Sample: 0, Answer: "paris; 1901", EM: []float32{1, 1}, F1: []float32{1, 1}, FormatOK: true, Reward: 1, TT: 34, PT: 19, Turns: 2},
		{UID: "q1", Sample: 1, Answer: "Paris; 1902", EM: []float32{1, 0}, F1: []float32{1, 0}, FormatOK: true, Reward: 0, TT: 16, PT: 16, Turns: 1},
		{UID: "q2", Sample: 0, EM: []float32{0, 0}, F1: []float32{0, 0}, TT: 12, PT: 12, Turns: 1},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("scores (-want +got):\n%s", diff)
	}
	// The summary: per trajectory, rewards 1, 0, 0; EM 1, 0.5, 0; F1 the same; two of
	// three well-formed; 4 turns, 62 tokens and peaks 19+16+12 over three.
	wantSum := map[string]float64{"trajectories": 3, "reward_mean": 1.0 / 3, "em_mean": 0.5, "f1_mean": 0.5,
		"format_ok_rate": 2.0 / 3, "turns_mean": 4.0 / 3, "tt_mean": 62.0 / 3, "pt_mean": 47.0 / 3}
	for k, v := range wantSum {
		if g := res.Manifest.Metrics[k]; math.Abs(g-v) > 1e-9 {
			t.Errorf("manifest metric %s = %v, want %v", k, g, v)
		}
	}

	again, err := Run(context.Background(), DefaultConfig(), in, jobs.Spec{Out: out})
	if err != nil || !again.Hit {
		t.Errorf("second Run = hit %v, %v; want a cache hit", again != nil && again.Hit, err)
	}
	mean := DefaultConfig()
	mean.Reward = RewardEMMean
	other, err := Run(context.Background(), mean, in, jobs.Spec{Out: out})
	if err != nil || other.Hit {
		t.Fatalf("Run with --reward em-mean = hit %v, %v; want a recompute", other != nil && other.Hit, err)
	}
}

func TestRunUnknownUID(t *testing.T) {
	dir := t.TempDir()
	if _, err := formattest.WriteDataset(filepath.Join(dir, "prompts"), "test", [][]format.Prompt{{{UID: "q1", Golds: [][]string{{"x"}}}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := formattest.WriteDataset(filepath.Join(dir, "rollouts"), "test", [][]format.Rollout{{turnRow("q9", 0, 0, "", 1, 1)}}); err != nil {
		t.Fatal(err)
	}
	in := Inputs{Rollouts: filepath.Join(dir, "rollouts"), Prompts: filepath.Join(dir, "prompts")}
	_, err := Run(context.Background(), DefaultConfig(), in, jobs.Spec{Out: filepath.Join(dir, "scores")})
	if !errors.Is(err, ErrInput) {
		t.Fatalf("Run with an unknown uid = %v, want ErrInput", err)
	}
	if _, err := format.OpenDataset(filepath.Join(dir, "scores")); !errors.Is(err, format.ErrNotDataset) {
		t.Errorf("after a failed run, OpenDataset = %v, want ErrNotDataset (nothing published)", err)
	}
}
