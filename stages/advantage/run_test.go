package advantage

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mempo/mempo/format"
	"github.com/mempo/mempo/format/formattest"
	"github.com/mempo/mempo/jobs"
)

func f32(v float32) *float32 { return &v }
func i32(v int32) *int32     { return &v }

// stageFixture writes one question with two samples: sample 0 (reward 1) has two turns,
// the first with a memory at tokens [0,2) of 4 that holds both gold answers; sample 1
// (reward 0) has one turn with a memory at [0,1) of 3 that holds none.
func stageFixture(t *testing.T, dir string) Inputs {
	t.Helper()
	rolls := []format.Rollout{
		{UID: "q", Sample: 0, Turn: 0, ResponseIDs: make([]int32, 4), MemStart: 0, MemEnd: 2},
		{UID: "q", Sample: 0, Turn: 1, ResponseIDs: make([]int32, 2)},
		{UID: "q", Sample: 1, Turn: 0, ResponseIDs: make([]int32, 3), MemStart: 0, MemEnd: 1},
	}
	scores := []format.Score{{UID: "q", Sample: 0, Reward: 1}, {UID: "q", Sample: 1, Reward: 0}}
	lps := []format.Logprob{
		{UID: "q", Sample: 0, Turn: 0, PMem: f32(0.75), PFull: f32(0.25), MemGolds: i32(2), Objectives: 2},
		{UID: "q", Sample: 0, Turn: 1, Objectives: 2},
		{UID: "q", Sample: 1, Turn: 0, PMem: f32(0.25), PFull: f32(0.5), MemGolds: i32(0), Objectives: 2},
	}
	in := Inputs{Rollouts: filepath.Join(dir, "rollouts"), Scores: filepath.Join(dir, "scores"), Logprobs: filepath.Join(dir, "logprobs")}
	if _, err := formattest.WriteDataset(in.Rollouts, "test", [][]format.Rollout{rolls}); err != nil {
		t.Fatal(err)
	}
	if _, err := formattest.WriteDataset(in.Scores, "test", [][]format.Score{scores}); err != nil {
		t.Fatal(err)
	}
	if _, err := formattest.WriteDataset(in.Logprobs, "test", [][]format.Logprob{lps}); err != nil {
		t.Fatal(err)
	}
	return in
}

func readAdvantages(t *testing.T, dir string) []format.Advantage {
	t.Helper()
	rows, err := format.ReadDataset[format.Advantage](dir)
	if err != nil {
		t.Fatalf("read %s: %v", dir, err)
	}
	return rows
}

func TestRunStage(t *testing.T) {
	dir := t.TempDir()
	in := stageFixture(t, dir)
	out := filepath.Join(dir, "adv")
	res, err := Run(context.Background(), DefaultConfig(), in, jobs.Spec{Out: out})
	if err != nil {
		t.Fatal(err)
	}
	rows := readAdvantages(t, out)
	if len(rows) != 3 {
		t.Fatalf("got %d rows, want 3", len(rows))
	}
	// Outcome: rewards {1, 0}: mean 0.5, unbiased std sqrt(0.5); A = ±0.5/(0.7071068+1e-6).
	aT := 0.5 / (math.Sqrt(0.5) + Epsilon)
	// Memory rewards (baseline full): 0.5 and -0.25 pooled: mean 0.125, std sqrt(0.28125).
	aM := 0.375 / (math.Sqrt(0.28125) + Epsilon)
	want := [][]float64{
		{aT + aM, aT + aM, aT, aT},
		{aT, aT},
		{-aT - aM, -aT, -aT},
	}
	for i, r := range rows {
		if len(r.Advantages) != len(want[i]) {
			t.Fatalf("row %d: %d advantages, want %d", i, len(r.Advantages), len(want[i]))
		}
		for j, a := range r.Advantages {
			if math.Abs(float64(a)-want[i][j]) > 1e-6 {
				t.Errorf("row %d token %d: advantage %v, want %v", i, j, a, want[i][j])
			}
		}
	}
	if rows[1].MemReward != nil || rows[0].MemReward == nil || *rows[0].MemReward != 0.5 {
		t.Errorf("mem_reward = %v, %v; want 0.5 for the memory turn and null for the turn without one", rows[0].MemReward, rows[1].MemReward)
	}
	if got := res.Manifest.Metrics["memories"]; got != 2 {
		t.Errorf("manifest memories = %v, want 2", got)
	}
	if got := res.Manifest.Metrics["adv_outcome_mean"]; math.Abs(got) > 1e-9 {
		t.Errorf("manifest adv_outcome_mean = %v, want 0", got)
	}
	// The memory reward split by what the memory holds: R^M 0.5 for "all", -0.25 for
	// "none", so R^M ranks the informative memory first (AUC 1).
	for name, want := range map[string]float64{"memories_all": 1, "memories_some": 0, "memories_none": 1,
		"mem_reward_mean_all": 0.5, "mem_reward_mean_none": -0.25, "auc_mem_reward_all_vs_none": 1} {
		if got, ok := res.Manifest.Metrics[name]; !ok || math.Abs(got-want) > 1e-9 {
			t.Errorf("manifest %s = %v (present %v), want %v", name, got, ok, want)
		}
	}
	for name := range res.Manifest.Metrics {
		if strings.Contains(name, "facts") {
			t.Errorf("manifest without supporting facts has %q", name)
		}
	}

	if again, err := Run(context.Background(), DefaultConfig(), in, jobs.Spec{Out: out}); err != nil || !again.Hit {
		t.Errorf("second Run: hit %v, %v; want a cache hit", again != nil && again.Hit, err)
	}
	grpo := DefaultConfig()
	grpo.MemCoef = 0
	if _, err := Run(context.Background(), grpo, in, jobs.Spec{Out: out}); err != nil {
		t.Fatal(err)
	}
	for i, r := range readAdvantages(t, out) {
		for j, a := range r.Advantages {
			if w := math.Copysign(aT, want[i][j]); math.Abs(float64(a)-w) > 1e-6 {
				t.Errorf("--mem-coef 0: row %d token %d: %v, want plain GRPO %v", i, j, a, w)
			}
		}
	}
}

func TestRunStageRejectsForeignInputs(t *testing.T) {
	dir := t.TempDir()
	in := stageFixture(t, dir)
	// A logprobs dataset whose manifest says it came from other rollouts.
	m, err := format.ReadManifest(in.Logprobs)
	if err != nil {
		t.Fatal(err)
	}
	m.Inputs = []format.Input{{Name: "rollouts", Path: "elsewhere", Digest: "dataset:0000"}}
	if err := format.WriteManifest(in.Logprobs, m); err != nil {
		t.Fatal(err)
	}
	_, err = Run(context.Background(), DefaultConfig(), in, jobs.Spec{Out: filepath.Join(dir, "adv")})
	if !errors.Is(err, ErrInput) {
		t.Fatalf("Run with logprobs of other rollouts = %v, want ErrInput", err)
	}
	if _, err := format.OpenDataset(filepath.Join(dir, "adv")); !errors.Is(err, format.ErrNotDataset) {
		t.Errorf("OpenDataset after a rejected run = %v, want ErrNotDataset", err)
	}
}

// TestRunStageWithoutMemoryPass: log-probs scored with --memory-pass=false carry no
// p_mem; GRPO (--mem-coef 0) runs on them with the advantages it computes from full
// log-probs, MemPO refuses them.
func TestRunStageWithoutMemoryPass(t *testing.T) {
	dir := t.TempDir()
	full, bare := stageFixture(t, t.TempDir()), stageFixture(t, t.TempDir())
	rows, err := format.ReadDataset[format.Logprob](bare.Logprobs)
	if err != nil {
		t.Fatal(err)
	}
	for i := range rows {
		rows[i].PMem, rows[i].PFull = nil, nil
	}
	if err := os.RemoveAll(bare.Logprobs); err != nil {
		t.Fatal(err)
	}
	if _, err := formattest.WriteDataset(bare.Logprobs, "test", [][]format.Logprob{rows}); err != nil {
		t.Fatal(err)
	}
	grpo := DefaultConfig()
	grpo.MemCoef = 0
	if _, err := Run(context.Background(), grpo, full, jobs.Spec{Out: filepath.Join(dir, "adv-full")}); err != nil {
		t.Fatal(err)
	}
	if _, err := Run(context.Background(), grpo, bare, jobs.Spec{Out: filepath.Join(dir, "adv-bare")}); err != nil {
		t.Fatalf("GRPO without a memory pass: %v", err)
	}
	want, got := readAdvantages(t, filepath.Join(dir, "adv-full")), readAdvantages(t, filepath.Join(dir, "adv-bare"))
	for i := range want {
		if !slices.Equal(want[i].Advantages, got[i].Advantages) || got[i].MemReward != nil {
			t.Errorf("row %d: advantages %v mem_reward %v, want %v and none", i, got[i].Advantages, got[i].MemReward, want[i].Advantages)
		}
	}
	_, err = Run(context.Background(), DefaultConfig(), bare, jobs.Spec{Out: filepath.Join(dir, "adv-mempo")})
	if !errors.Is(err, ErrInput) {
		t.Fatalf("MemPO without a memory pass = %v, want ErrInput", err)
	}
	t.Log(err)
}

// TestRunStageContextBaseline: --mem-baseline context reads p_ctx, and refuses log-probs
// scored without it, naming the column and the flag; --mem-baseline none needs neither
// p_full nor p_ctx.
func TestRunStageContextBaseline(t *testing.T) {
	dir := t.TempDir()
	in := stageFixture(t, dir)
	rows, err := format.ReadDataset[format.Logprob](in.Logprobs)
	if err != nil {
		t.Fatal(err)
	}
	ctx := DefaultConfig()
	ctx.MemBaseline = Baseline{Kind: BaselineContext}
	_, err = Run(context.Background(), ctx, in, jobs.Spec{Out: filepath.Join(dir, "adv-missing")})
	if !errors.Is(err, ErrInput) || !strings.Contains(err.Error(), "no p_ctx (scored without --p-ctx?)") {
		t.Errorf("context baseline without p_ctx = %v, want ErrInput naming p_ctx and --p-ctx", err)
	}
	rows[0].PCtx, rows[2].PCtx = f32(0.5), f32(0.125)
	rows[0].PFull, rows[2].PFull = nil, nil
	rewrite(t, in.Logprobs, rows)
	if _, err := Run(context.Background(), ctx, in, jobs.Spec{Out: filepath.Join(dir, "adv-ctx")}); err != nil {
		t.Fatal(err)
	}
	got := readAdvantages(t, filepath.Join(dir, "adv-ctx"))
	for _, c := range []struct {
		row  int
		want float32
	}{{0, 0.75 - 0.5}, {2, 0.25 - 0.125}} {
		if r := got[c.row].MemReward; r == nil || *r != c.want {
			t.Errorf("row %d: mem_reward %v, want p_mem − p_ctx = %v", c.row, r, c.want)
		}
	}
	none := DefaultConfig()
	none.MemBaseline = Baseline{Kind: BaselineNone}
	if _, err := Run(context.Background(), none, in, jobs.Spec{Out: filepath.Join(dir, "adv-none")}); err != nil {
		t.Errorf("no baseline on log-probs without p_full: %v", err)
	}
	if _, err := Run(context.Background(), DefaultConfig(), in, jobs.Spec{Out: filepath.Join(dir, "adv-full")}); !errors.Is(err, ErrInput) || !strings.Contains(err.Error(), "no p_full") {
		t.Errorf("full baseline without p_full = %v, want ErrInput naming p_full", err)
	}
}

// TestRunStageNaNNamesItsFile: a non-finite reward or memory probability is reported
// against the shard and row that hold it, not against the rollouts.
func TestRunStageNaNNamesItsFile(t *testing.T) {
	nan := float32(math.NaN())
	tests := []struct {
		name   string
		edit   func(t *testing.T, in Inputs)
		file   func(in Inputs) string
		column string
	}{
		{"reward", func(t *testing.T, in Inputs) {
			rows, err := format.ReadDataset[format.Score](in.Scores)
			if err != nil {
				t.Fatal(err)
			}
			rows[1].Reward = nan
			rewrite(t, in.Scores, rows)
		}, func(in Inputs) string { return in.Scores }, `row 1 (uid q sample 1): column "reward" is NaN`},
		{"p_mem", func(t *testing.T, in Inputs) {
			rows, err := format.ReadDataset[format.Logprob](in.Logprobs)
			if err != nil {
				t.Fatal(err)
			}
			rows[2].PMem = &nan
			rewrite(t, in.Logprobs, rows)
		}, func(in Inputs) string { return in.Logprobs }, `row 2 (uid q sample 1 turn 0): column "p_mem" is NaN`},
		{"p_full", func(t *testing.T, in Inputs) {
			rows, err := format.ReadDataset[format.Logprob](in.Logprobs)
			if err != nil {
				t.Fatal(err)
			}
			inf := float32(math.Inf(1))
			rows[0].PFull = &inf
			rewrite(t, in.Logprobs, rows)
		}, func(in Inputs) string { return in.Logprobs }, `row 0 (uid q sample 0 turn 0): column "p_full" is +Inf`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			in := stageFixture(t, dir)
			tt.edit(t, in)
			_, err := Run(context.Background(), DefaultConfig(), in, jobs.Spec{Out: filepath.Join(dir, "adv")})
			if !errors.Is(err, ErrInput) {
				t.Fatalf("Run = %v, want ErrInput", err)
			}
			// The bad input comes first, the file being written after it (issue 45).
			want := "stage advantage: shard 0: " + filepath.Join(tt.file(in), format.ShardName(0)) + ": " + tt.column
			if !strings.HasPrefix(err.Error(), want) {
				t.Errorf("Run = %q, want it to start %q", err, want)
			}
			if strings.Contains(err.Error(), in.Rollouts+"/") {
				t.Errorf("Run = %q names the rollouts, which hold no NaN", err)
			}
			// A rerun of the same key would find the same NaN: the failed run leaves
			// nothing beside the output, and a run on good inputs succeeds.
			if left, _ := filepath.Glob(filepath.Join(dir, "adv*")); len(left) != 0 {
				t.Errorf("after the failed run: %v beside the output, want nothing", left)
			}
			good := stageFixture(t, t.TempDir())
			if _, err := Run(context.Background(), DefaultConfig(), good, jobs.Spec{Out: filepath.Join(dir, "adv")}); err != nil {
				t.Fatal(err)
			}
			if left, _ := filepath.Glob(filepath.Join(dir, "adv.*")); len(left) != 0 {
				t.Errorf("after a failed and a good run: %v beside the output, want nothing", left)
			}
		})
	}
}

// rewrite replaces dataset dir with one shard of rows.
func rewrite[R format.Row](t *testing.T, dir string, rows []R) {
	t.Helper()
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := formattest.WriteDataset(dir, "test", [][]R{rows}); err != nil {
		t.Fatal(err)
	}
}

// TestRunStagePathNotKeyed: the cache key depends on the inputs' content, not on how
// their paths are written: absolute paths, then relative ones, then a moved copy of the
// same datasets give the same key, so the second and third runs are cache hits.
func TestRunStagePathNotKeyed(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "iter-0"), 0o755); err != nil {
		t.Fatal(err)
	}
	in := stageFixture(t, filepath.Join(dir, "iter-0"))
	out := filepath.Join(dir, "adv")
	run := func(in Inputs) *jobs.Result {
		t.Helper()
		res, err := Run(context.Background(), DefaultConfig(), in, jobs.Spec{Out: out})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	if run(in).Hit {
		t.Fatal("first run is a cache hit")
	}
	t.Chdir(dir)
	rel := Inputs{Rollouts: "iter-0/rollouts", Scores: "./iter-0/scores", Logprobs: "iter-0//logprobs/"}
	if !run(rel).Hit {
		t.Errorf("relative paths %+v: not a cache hit", rel)
	}
	if err := os.Rename(filepath.Join(dir, "iter-0"), filepath.Join(dir, "moved")); err != nil {
		t.Fatal(err)
	}
	moved := Inputs{Rollouts: filepath.Join(dir, "moved", "rollouts"), Scores: filepath.Join(dir, "moved", "scores"), Logprobs: filepath.Join(dir, "moved", "logprobs")}
	if !run(moved).Hit {
		t.Errorf("moved copy %+v: not a cache hit", moved)
	}
}

// With supporting facts in the logprobs, the memory reward is split by facts too, beside
// the split by answer names: here the memory naming both answers holds no fact and the
// one naming none holds every fact, so the two splits disagree.
func TestRunStageFactsSplit(t *testing.T) {
	dir := t.TempDir()
	in := stageFixture(t, dir)
	lps := []format.Logprob{
		{UID: "q", Sample: 0, Turn: 0, PMem: f32(0.75), PFull: f32(0.25), MemGolds: i32(2), Objectives: 2, MemFacts: i32(0), Facts: 3},
		{UID: "q", Sample: 0, Turn: 1, Objectives: 2, Facts: 3},
		{UID: "q", Sample: 1, Turn: 0, PMem: f32(0.25), PFull: f32(0.5), MemGolds: i32(0), Objectives: 2, MemFacts: i32(3), Facts: 3},
	}
	in.Logprobs = filepath.Join(dir, "logprobs-facts")
	if _, err := formattest.WriteDataset(in.Logprobs, "test", [][]format.Logprob{lps}, format.WithOptional("mem_facts", "facts")); err != nil {
		t.Fatal(err)
	}
	res, err := Run(context.Background(), DefaultConfig(), in, jobs.Spec{Out: filepath.Join(dir, "adv")})
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]float64{"memories_all": 1, "memories_none": 1, "auc_mem_reward_all_vs_none": 1,
		"memories_facts_all": 1, "memories_facts_some": 0, "memories_facts_none": 1,
		"mem_reward_mean_facts_all": -0.25, "mem_reward_mean_facts_none": 0.5, "auc_mem_reward_facts_all_vs_none": 0} {
		if got, ok := res.Manifest.Metrics[name]; !ok || math.Abs(got-want) > 1e-9 {
			t.Errorf("manifest %s = %v (present %v), want %v", name, got, ok, want)
		}
	}
}
