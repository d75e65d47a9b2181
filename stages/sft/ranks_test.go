package sft

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/mempo/mempo/format"
	"github.com/mempo/mempo/jobs"
	"github.com/mempo/mempo/model/qwen2/qwen2test"
	"github.com/mempo/mempo/train/collective/collectivetest"
)

// rankEnv carries a rank's arguments: the test binary re-executed as one rank of an
// SFT trained by a process group, with torchrun's variables beside it.
const rankEnv = "MEMPO_SFT_TEST_RANK"

type rankArgs struct {
	In  Inputs
	Out string
}

// rankMain runs one rank: it joins the group and runs SFT, rank 0 writing a.Out.
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
	c := testConfig()
	c.WorldSize, c.Group = g.World(), g
	if _, err := Run(context.Background(), c, a.In, jobs.Spec{Out: a.Out, Seed: 1}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// TestWorldSize: SFT trained by two ranks of a process group writes, from rank 0, the
// weights and held-out losses one process writes, to float32 rounding, under a cache
// key of its own.
func TestWorldSize(t *testing.T) {
	f := newFixture(t)
	one, err := Run(context.Background(), testConfig(), f.in, jobs.Spec{Out: filepath.Join(f.dir, "one"), Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(f.dir, "world2")
	b, _ := json.Marshal(rankArgs{In: f.in, Out: out})
	for r, rk := range collectivetest.Launch(t, 2, 3*time.Minute, rankEnv+"="+string(b)) {
		if rk.Err != nil {
			t.Fatalf("rank %d: %v\n%s", r, rk.Err, rk.Stderr)
		}
	}
	rel := qwen2test.RelDiff(qwen2test.WeightValues(t, out), qwen2test.WeightValues(t, one.Dir))
	t.Logf("two ranks' weights are %.2g (relative L2) off one process's", rel)
	if !(rel < 1e-4) {
		t.Errorf("weights trained by two ranks are %.2g (relative L2) off one process's", rel)
	}
	st, err := format.ReadTrainerState(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"heldout_loss_before", "heldout_loss_after", "train_loss_first", "train_loss_last"} {
		if g, w := st.Metrics[k], one.State.Metrics[k]; math.Abs(g-w) > 1e-4*w {
			t.Errorf("%s = %v with two ranks, %v with one", k, g, w)
		}
	}
	c1, err1 := format.ReadCommit(one.Dir)
	c2, err2 := format.ReadCommit(out)
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	if c1.CacheKey == c2.CacheKey {
		t.Errorf("one process and two ranks share the key %s", c1.CacheKey)
	}
}
