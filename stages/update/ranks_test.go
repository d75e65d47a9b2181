package update

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mempo/mempo/format"
	"github.com/mempo/mempo/jobs"
	"github.com/mempo/mempo/model/qwen2/qwen2test"
	"github.com/mempo/mempo/train/collective/collectivetest"
)

// rankEnv carries a rank's arguments: the test binary re-executed as one rank of an
// update trained by a process group, with torchrun's variables beside it.
const rankEnv = "MEMPO_PPO_TEST_RANK"

type rankArgs struct {
	In   Inputs
	Out  string
	Cfg  Config
	Kill int // exit after this many mini-batches on rank 1 (0: never)
}

// rankMain runs one rank: it joins the group torchrun's variables describe and runs
// the update, rank 0 writing a.Out.
func rankMain() int {
	var a rankArgs
	if err := json.Unmarshal([]byte(os.Getenv(rankEnv)), &a); err != nil {
		fmt.Fprintln(os.Stderr, "rank args:", err)
		return 3
	}
	g, err := collectivetest.Join(30 * time.Second)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer g.Close()
	a.Cfg.WorldSize, a.Cfg.Group = g.World(), g
	spec := jobs.Spec{Out: a.Out, Seed: 1, Trace: func(step jobs.Step, n int) {
		if step == jobs.StepRecorded && n == a.Kill {
			os.Exit(4) // rank 0 after its snapshot: rank 1 must fail, nothing published
		}
	}}
	if _, err := Run(context.Background(), a.Cfg, a.In, spec); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// launchRanks runs world ranks of an update as torchrun would and returns each one's
// error and standard error.
func launchRanks(t *testing.T, world int, a rankArgs) ([]error, []string) {
	t.Helper()
	b, _ := json.Marshal(a)
	ranks := collectivetest.Launch(t, world, 3*time.Minute, rankEnv+"="+string(b))
	errs, stderrs := make([]error, world), make([]string, world)
	for r, rk := range ranks {
		errs[r], stderrs[r] = rk.Err, rk.Stderr
	}
	return errs, stderrs
}

// TestWorldSize: an update trained by two and by three ranks of a process group
// (c10d's TCPStore and Gloo, as torchrun sets them up) writes, from rank 0, the weights
// one process writes to float32 rounding, under a cache key of its own.
func TestWorldSize(t *testing.T) {
	f := newFixture(t, groupTurns(rand.New(rand.NewPCG(7, 8)), 3, 4))
	cfg := testConfig()
	cfg.MicroTokenBudget = 96
	cfg.Objective.KLCoef, cfg.Objective.EntropyCoef = 0.05, 0.01
	one, err := Run(context.Background(), cfg, f.in, jobs.Spec{Out: filepath.Join(f.dir, "one"), Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, world := range []int{2, 3} {
		t.Run(fmt.Sprint(world), func(t *testing.T) {
			out := filepath.Join(f.dir, fmt.Sprint("world", world))
			errs, stderrs := launchRanks(t, world, rankArgs{In: f.in, Out: out, Cfg: cfg})
			for r, err := range errs {
				if err != nil {
					t.Fatalf("rank %d: %v\n%s", r, err, stderrs[r])
				}
			}
			st, err := format.ReadTrainerState(out)
			if err != nil {
				t.Fatal(err)
			}
			d := qwen2test.ChangeDiff(t, f.in.Policy, out, one.Dir)
			t.Logf("%d ranks: the weights' change differs from one process's by %.3g relative", world, d)
			if !(d <= 1e-5) {
				t.Errorf("weights' change with %d ranks differs by %.3g relative, want <= 1e-5", world, d)
			}
			for _, k := range []string{"pg_loss", "kl", "entropy", "pg_clipfrac", "tokens"} {
				g, w := st.Metrics[k], one.State.Metrics[k]
				if math.Abs(g-w) > 1e-5*math.Max(1, math.Abs(w)) {
					t.Errorf("%s = %v with %d ranks, %v with one", k, g, world, w)
				}
			}
			got, err1 := format.ReadCommit(out)
			alone, err2 := format.ReadCommit(one.Dir)
			if err1 != nil || err2 != nil {
				t.Fatal(err1, err2)
			}
			if got.CacheKey == alone.CacheKey {
				t.Errorf("--world-size %d did not change the cache key", world)
			}
		})
	}
}

// TestRankDies: when rank 0 dies after its first snapshot, rank 1 fails instead of
// waiting, nothing is published, and a rerun of both ranks resumes from the snapshot
// and ends where an uninterrupted two-rank run does.
func TestRankDies(t *testing.T) {
	f := newFixture(t, randomTurns(rand.New(rand.NewPCG(9, 10)), 6))
	cfg := resumeConfig()
	clean := filepath.Join(f.dir, "clean")
	if errs, stderrs := launchRanks(t, 2, rankArgs{In: f.in, Out: clean, Cfg: cfg}); errs[0] != nil || errs[1] != nil {
		t.Fatalf("uninterrupted: %v %v\n%s\n%s", errs[0], errs[1], stderrs[0], stderrs[1])
	}
	out := filepath.Join(f.dir, "killed")
	errs, stderrs := launchRanks(t, 2, rankArgs{In: f.in, Out: out, Cfg: cfg, Kill: 1})
	if errs[0] == nil || errs[1] == nil {
		t.Fatalf("with rank 0 gone after a snapshot: rank 0 %v, rank 1 %v; want both failed", errs[0], errs[1])
	}
	t.Logf("rank 1: %s", stderrs[1])
	if !strings.Contains(stderrs[1], "rank 1 of 2") {
		t.Errorf("rank 1's error does not name it: %s", stderrs[1])
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Fatalf("after rank 0 died, %s exists (%v); want nothing published", out, err)
	}
	if errs, stderrs = launchRanks(t, 2, rankArgs{In: f.in, Out: out, Cfg: cfg}); errs[0] != nil || errs[1] != nil {
		t.Fatalf("rerun: %v %v\n%s\n%s", errs[0], errs[1], stderrs[0], stderrs[1])
	}
	st, err := format.ReadTrainerState(out)
	if err != nil {
		t.Fatal(err)
	}
	want, err := format.ReadTrainerState(clean)
	if err != nil {
		t.Fatal(err)
	}
	if d := qwen2test.ChangeDiff(t, f.in.Policy, out, clean); d != 0 {
		t.Errorf("the resumed two-rank run's weights differ from the uninterrupted one's by %.3g relative", d)
	}
	if st.Step != want.Step {
		t.Errorf("resumed run ends at step %d, uninterrupted at %d", st.Step, want.Step)
	}
}
