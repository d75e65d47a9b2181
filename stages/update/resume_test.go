package update

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/mempo/mempo/format"
	"github.com/mempo/mempo/jobs"
	"github.com/mempo/mempo/model/qwen2"
	"github.com/mempo/mempo/model/safetensors"
	"github.com/mempo/mempo/train"
	"github.com/mempo/mempo/train/dataparallel"
)

// childEnv carries a child run's arguments: the test binary re-executed runs one update
// and SIGKILLs itself after its kill-th mini-batch is snapshotted.
const childEnv = "MEMPO_PPO_TEST_CHILD"

type childArgs struct {
	In   Inputs
	Out  string
	Kill int
}

func TestMain(m *testing.M) {
	// The test binary is also the executable of the update's data-parallel workers.
	dataparallel.ServeWorker()
	if os.Getenv(childEnv) != "" {
		os.Exit(child())
	}
	if os.Getenv(rankEnv) != "" {
		os.Exit(rankMain())
	}
	os.Exit(m.Run())
}

func child() int {
	var a childArgs
	if err := json.Unmarshal([]byte(os.Getenv(childEnv)), &a); err != nil {
		fmt.Fprintln(os.Stderr, "child args:", err)
		return 3
	}
	spec := jobs.Spec{Out: a.Out, Seed: 1, Trace: func(step jobs.Step, n int) {
		if step == jobs.StepRecorded && n == a.Kill {
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}
	}}
	if _, err := Run(context.Background(), resumeConfig(), a.In, spec); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

func resumeConfig() Config {
	c := testConfig()
	c.MiniBatches, c.PPOEpochs = 2, 2
	c.MicroTokenBudget = 40
	c.Objective.KLCoef, c.Objective.EntropyCoef = 0.01, 0.001
	c.AdamW.WarmupSteps = 2
	return c
}

// TestResumeAfterKill kills an update with SIGKILL right after its first mini-batch is
// snapshotted, reruns it, and checks it resumed there and ended bit for bit where an
// uninterrupted run ends: the same weights, optimizer state and loss metrics.
func TestResumeAfterKill(t *testing.T) {
	f := newFixture(t, randomTurns(rand.New(rand.NewPCG(9, 10)), 6))
	clean := filepath.Join(f.dir, "clean")
	if _, err := Run(context.Background(), resumeConfig(), f.in, jobs.Spec{Out: clean, Seed: 1}); err != nil {
		t.Fatal(err)
	}

	out := filepath.Join(f.dir, "killed")
	b, _ := json.Marshal(childArgs{In: f.in, Out: out, Kill: 1})
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+string(b))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || !exit.Sys().(syscall.WaitStatus).Signaled() {
		t.Fatalf("child = %v, want killed by SIGKILL\nstderr:\n%s", err, stderr.String())
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Fatalf("after the kill, %s exists (%v); want nothing published", out, err)
	}

	res, err := Run(context.Background(), resumeConfig(), f.in, jobs.Spec{Out: out, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if res.Resumed != 1 {
		t.Errorf("rerun resumed %d mini-batches, want 1", res.Resumed)
	}
	for _, name := range []string{safetensors.SingleFile, train.OptimizerFile, qwen2.ConfigFile, format.TokenizerFile} {
		a, err1 := os.ReadFile(filepath.Join(clean, name))
		b, err2 := os.ReadFile(filepath.Join(out, name))
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		if !bytes.Equal(a, b) {
			t.Errorf("%s differs between the resumed and the uninterrupted run", name)
		}
	}
	// Timings differ from run to run; everything else in the metrics must match.
	ignore := cmpopts.IgnoreFields(Metric{}, "Seconds", "TokensPerS")
	if diff := cmp.Diff(readMetrics(t, clean), readMetrics(t, out), ignore); diff != "" {
		t.Errorf("metrics (-uninterrupted +resumed):\n%s", diff)
	}
}
