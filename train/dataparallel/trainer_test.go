package dataparallel

import (
	"errors"
	"math"
	"testing"

	"github.com/mempo/mempo/model/qwen2"
	"github.com/mempo/mempo/model/torch"
	"github.com/mempo/mempo/train"
)

// adamOn is AdamW over m's weights at a large LR, so one step moves them visibly.
func adamOn(t *testing.T, m *qwen2.Model) *train.AdamW {
	t.Helper()
	ps, err := train.Trainable(m)
	if err != nil {
		t.Fatal(err)
	}
	cfg := train.DefaultAdamW
	cfg.LR = 1e-2
	adam, err := train.NewAdamW(ps, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(adam.Drop)
	return adam
}

// weights is every weight of m on the host.
func weights(m *qwen2.Model) [][]float64 {
	var out [][]float64
	for _, w := range m.Weights() {
		out = append(out, torch.ToHost[float64](torch.Of(w.Tensor)))
	}
	return out
}

// TestTrainerPPOInProcessMatchesGroup: one mini-batch stepped by a Trainer in this
// process and by one with a local group of three cuts the same micro-batches, reports
// the same stats and leaves the same weights, which the AdamW step moved.
func TestTrainerPPOInProcessMatchesGroup(t *testing.T) {
	obj := train.DefaultObjective
	obj.EntropyCoef = 0.01
	seqs := sequences(9)
	run := func(tr *Trainer) (PPOResult, [][]float64, [][]float64) {
		m := model(t)
		before := weights(m)
		adam := adamOn(t, m)
		step := train.PPOStep{Model: m, Objective: obj, Temperature: 0.7, SharePrefixes: true}
		res, err := tr.PPO(step, adam, seqs, 60)
		if err != nil {
			t.Fatal(err)
		}
		if adam.Steps() != 1 {
			t.Errorf("%d AdamW steps after one mini-batch, want 1", adam.Steps())
		}
		return res, before, weights(m)
	}
	one := &Trainer{}
	want, before, wantW := run(one)
	group := &Trainer{Procs: 3, Options: qwen2.Options{DType: "float32"}}
	t.Cleanup(group.Close)
	got, _, gotW := run(group)
	if want.Micros < 3 {
		t.Fatalf("%d micro-batches under a 60-token budget, want several", want.Micros)
	}
	if got.Micros != want.Micros || got.Tokens != want.Tokens {
		t.Errorf("group: %d micro-batches, %d tokens; one process: %d, %d", got.Micros, got.Tokens, want.Micros, want.Tokens)
	}
	if math.Abs(got.Total-want.Total) > 1e-5*math.Max(1, math.Abs(want.Total)) || math.Abs(got.GradNorm-want.GradNorm) > 1e-4*want.GradNorm {
		t.Errorf("group: loss %v grad norm %v; one process: %v, %v", got.Total, got.GradNorm, want.Total, want.GradNorm)
	}
	if d := relDiff(wantW, before); !(d > 1e-4) {
		t.Errorf("weights moved %.2g (relative L2) in one step: no AdamW step?", d)
	}
	if d := relDiff(gotW, wantW); !(d < 1e-5) {
		t.Errorf("weights after the group's step %.2g (relative L2) off one process's", d)
	}
}

// TestTrainerMicroError: a micro-batch whose loss is not finite fails the step before
// AdamW, naming the micro-batch and its first sequence.
func TestTrainerMicroError(t *testing.T) {
	m := model(t)
	adam := adamOn(t, m)
	seqs := sequences(6)
	seqs[4].Adv[0] = float32(math.NaN())
	step := train.PPOStep{Model: m, Objective: train.DefaultObjective}
	cut := step.Cut(seqs, 60)
	var bad []int
	for _, mi := range cut {
		for _, i := range mi {
			if i == 4 {
				bad = mi
			}
		}
	}
	_, err := (&Trainer{}).PPO(step, adam, seqs, 60)
	var me *MicroError
	if !errors.As(err, &me) || !errors.Is(err, train.ErrNonFinite) {
		t.Fatalf("err = %v, want a MicroError wrapping ErrNonFinite", err)
	}
	if me.First != bad[0] || me.Micros != len(cut) {
		t.Errorf("MicroError names micro-batch %d of %d from sequence %d, want the one from sequence %d of %d", me.Micro, me.Micros, me.First, bad[0], len(cut))
	}
	if adam.Steps() != 0 {
		t.Errorf("%d AdamW steps after a failed mini-batch, want 0", adam.Steps())
	}
}
