package update

import (
	"context"
	"errors"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mempo/mempo/format"
	"github.com/mempo/mempo/jobs"
	"github.com/mempo/mempo/model/qwen2/qwen2test"
	"github.com/mempo/mempo/train"
)

// TestGradCheckpoint: an update with activation checkpointing writes the checkpoint the
// plain update writes, to float32 rounding (relative L2 difference of the weights'
// change <= 1e-5), under another cache key; both print the memory estimate.
func TestGradCheckpoint(t *testing.T) {
	f := newFixture(t, randomTurns(rand.New(rand.NewPCG(3, 4)), 6))
	cfg := testConfig()
	cfg.Objective.KLCoef, cfg.Objective.EntropyCoef = 0.05, 0.01
	var plainOut, ckOut strings.Builder
	plain, err := Run(context.Background(), cfg, f.in, jobs.Spec{Out: filepath.Join(f.dir, "plain"), Seed: 1, Stdout: &plainOut})
	if err != nil {
		t.Fatal(err)
	}
	cfg.GradCheckpoint = true
	ck, err := Run(context.Background(), cfg, f.in, jobs.Spec{Out: filepath.Join(f.dir, "ckpt"), Seed: 1, Stdout: &ckOut})
	if err != nil {
		t.Fatal(err)
	}
	if ck.Key == plain.Key {
		t.Errorf("--grad-checkpoint did not change the cache key %s", ck.Key.Short())
	}
	for _, out := range []string{plainOut.String(), ckOut.String()} {
		if !strings.Contains(out, "update: memory estimate on cpu") {
			t.Errorf("stdout %q: want the memory estimate before training", out)
		}
	}
	if !strings.Contains(ckOut.String(), "grad checkpoint") {
		t.Errorf("stdout %q: want the checkpointed estimate", ckOut.String())
	}
	if d := qwen2test.ChangeDiff(t, f.in.Policy, ck.Dir, plain.Dir); !(d <= 1e-5) {
		t.Errorf("weights' change with --grad-checkpoint differs by %.3g relative, want <= 1e-5", d)
	} else {
		t.Logf("weights' change differs by %.3g relative", d)
	}
}

// TestMemoryRefused: a plan whose estimate exceeds --device-memory is refused before the
// model loads, with ErrMemory and a message naming the largest term and the flags that
// lower it; nothing is published.
func TestMemoryRefused(t *testing.T) {
	f := newFixture(t, randomTurns(rand.New(rand.NewPCG(3, 4)), 6))
	out := filepath.Join(f.dir, "out")
	_, err := Run(context.Background(), testConfig(), f.in, jobs.Spec{Out: out, Seed: 1}, train.WithDeviceMemory(1))
	if !errors.Is(err, train.ErrMemory) {
		t.Fatalf("Run with 1 byte of device memory = %v, want ErrMemory", err)
	}
	for _, s := range []string{"exceeds the 0.0 KiB available on cpu", "the largest term is optimizer", "more memory"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not mention %q", err, s)
		}
	}
	if _, err := format.ReadCommit(out); err == nil {
		t.Errorf("a refused run published %s", out)
	}
}
