package sft

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/mempo/mempo/format"
	"github.com/mempo/mempo/jobs"
	"github.com/mempo/mempo/model/safetensors"
	"github.com/mempo/mempo/train"
	"github.com/mempo/mempo/train/dataparallel"
)

const childEnv = "MEMPO_SFT_TEST_CHILD"

type childArgs struct {
	In    Inputs
	Out   string
	Procs int
}

func TestMain(m *testing.M) {
	// The test binary is also the executable of SFT's data-parallel workers.
	dataparallel.ServeWorker()
	if os.Getenv(childEnv) != "" {
		os.Exit(child())
	}
	if os.Getenv(rankEnv) != "" {
		os.Exit(rankMain())
	}
	os.Exit(m.Run())
}

// child runs SFT and SIGKILLs itself once the first snapshot is durable.
func child() int {
	var a childArgs
	if err := json.Unmarshal([]byte(os.Getenv(childEnv)), &a); err != nil {
		fmt.Fprintln(os.Stderr, "child args:", err)
		return 3
	}
	spec := jobs.Spec{Out: a.Out, Seed: 1, Trace: func(step jobs.Step, _ int) {
		if step == jobs.StepRecorded {
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}
	}}
	if _, err := Run(context.Background(), resumeConfig(a.Procs), a.In, spec); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

func resumeConfig(procs int) Config {
	c := testConfig()
	c.Questions, c.Epochs, c.Procs = 6, 2, procs
	return c
}

// TestResumeAfterKill kills SFT right after its first epoch's snapshot and checks the
// rerun resumes there and ends with the uninterrupted run's weights and optimizer state,
// in one process and in two (whose worker ends with its killed leader).
func TestResumeAfterKill(t *testing.T) {
	for _, procs := range []int{1, 2} {
		t.Run(fmt.Sprintf("procs=%d", procs), func(t *testing.T) { testResumeAfterKill(t, procs) })
	}
}

func testResumeAfterKill(t *testing.T, procs int) {
	f := newFixture(t)
	clean := filepath.Join(f.dir, "clean")
	if _, err := Run(context.Background(), resumeConfig(procs), f.in, jobs.Spec{Out: clean, Seed: 1}); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(f.dir, "killed")
	b, _ := json.Marshal(childArgs{In: f.in, Out: out, Procs: procs})
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+string(b))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || !exit.Sys().(syscall.WaitStatus).Signaled() {
		t.Fatalf("child = %v, want killed by SIGKILL\nstderr:\n%s", err, stderr.String())
	}
	res, err := Run(context.Background(), resumeConfig(procs), f.in, jobs.Spec{Out: out, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if res.Resumed == 0 || res.Resumed >= int(res.State.Step) {
		t.Errorf("rerun resumed %d of %d steps, want the first epoch's", res.Resumed, res.State.Step)
	}
	for _, name := range []string{safetensors.SingleFile, train.OptimizerFile, OracleFile} {
		x, err1 := os.ReadFile(filepath.Join(clean, name))
		y, err2 := os.ReadFile(filepath.Join(out, name))
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		if !bytes.Equal(x, y) {
			t.Errorf("%s differs between the resumed and the uninterrupted run", name)
		}
	}
	for _, k := range []string{"heldout_loss_before", "heldout_loss_after", "train_loss_last"} {
		if g, w := res.State.Metrics[k], readState(t, clean).Metrics[k]; g != w {
			t.Errorf("%s = %v resumed, %v uninterrupted", k, g, w)
		}
	}
}

func readState(t *testing.T, dir string) *format.TrainerState {
	t.Helper()
	s, err := format.ReadTrainerState(dir)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestLRSchedule(t *testing.T) {
	c := DefaultConfig()
	c.AdamW.LR, c.AdamW.WarmupSteps = 1, 2
	tests := []struct {
		schedule Schedule
		want     []float64 // steps 1..6 of 6
	}{
		{Constant, []float64{0, 0.5, 1, 1, 1, 1}},
		{Linear, []float64{0, 0.5, 1, 0.75, 0.5, 0.25}},
	}
	for _, tt := range tests {
		c.Schedule = tt.schedule
		for k, want := range tt.want {
			if got := c.lrAt(int64(k+1), 6); got != want {
				t.Errorf("%s: lrAt(%d, 6) = %v, want %v", tt.schedule, k+1, got, want)
			}
		}
	}
}
