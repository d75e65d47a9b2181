package dataparallel

import (
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/mempo/mempo/model/qwen2"
	"github.com/mempo/mempo/model/torch"
	"github.com/mempo/mempo/train"
)

// The test binary is also the workers' executable.
func TestMain(m *testing.M) {
	ServeWorker()
	os.Exit(m.Run())
}

// model is a small float32 Qwen2 with random weights, marked trainable.
func model(t *testing.T) *qwen2.Model {
	t.Helper()
	cfg, err := qwen2.Preset("tiny", 64)
	if err != nil {
		t.Fatal(err)
	}
	cfg.HiddenSize, cfg.IntermediateSize, cfg.NumLayers, cfg.NumHeads, cfg.NumKVHeads = 32, 64, 2, 4, 2
	m, err := qwen2.New(cfg, qwen2.Options{DType: "float32"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Drop)
	if err := m.Init(7); err != nil {
		t.Fatal(err)
	}
	if _, err := train.Trainable(m); err != nil {
		t.Fatal(err)
	}
	return m
}

// batch is n turns of random ids; every turn starts with the same 6-token prefix, as
// a system prompt does, so a tree pass shares it.
func batch(n int) []qwen2.Pair {
	rng := rand.New(rand.NewPCG(1, 2))
	ids := func(k int) []int64 {
		out := make([]int64, k)
		for i := range out {
			out[i] = rng.Int64N(64)
		}
		return out
	}
	prefix := ids(6)
	out := make([]qwen2.Pair, n)
	for i := range out {
		ctx := append(append([]int64(nil), prefix...), ids(3+rng.IntN(20))...)
		out[i] = qwen2.Pair{Context: ctx, Response: ids(2 + rng.IntN(12))}
	}
	return out
}

// grads takes the model's gradients and clears them.
func grads(t *testing.T, m *qwen2.Model) [][]float64 {
	t.Helper()
	var out [][]float64
	for _, w := range m.Weights() {
		g := torch.Of(w.Tensor).Grad()
		out = append(out, torch.ToHost[float64](g))
		g.Free()
		torch.Of(w.Tensor).ClearGrad()
	}
	return out
}

// relDiff is the relative L2 distance of got from want over all parameters.
func relDiff(got, want [][]float64) float64 {
	var num, den float64
	for i := range want {
		for j := range want[i] {
			d := got[i][j] - want[i][j]
			num += d * d
			den += want[i][j] * want[i][j]
		}
	}
	return math.Sqrt(num / den)
}

// scale multiplies every weight by f, as an optimizer step changes them.
func scale(t *testing.T, m *qwen2.Model, f float64) {
	t.Helper()
	torch.Do(func() {
		defer torch.SetGrad(torch.SetGrad(false))
		for _, w := range m.Weights() {
			torch.Of(w.Tensor).MulScalar_(f)
		}
	})
}

func startGroup(t *testing.T, step train.NLLStep, procs int) *Group {
	t.Helper()
	g, err := StartNLL(step, Config{Procs: procs, Threads: 1, Options: qwen2.Options{DType: "float32"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Close)
	return g
}

// TestGroupMatchesOneProcess checks that a batch run across a leader and two workers
// has the loss, token count and gradients of the same batch run in one process, on
// two steps with different weights (each step runs on the leader's current weights).
func TestGroupMatchesOneProcess(t *testing.T) {
	m := model(t)
	step := train.NLLStep{Model: m, ContextWeight: 0.2, SharePrefixes: true}
	b := batch(7)
	g := startGroup(t, step, 3)
	for k, f := range []float64{1, 0.8} {
		scale(t, m, f)
		wantLoss, wantTokens, err := step.Backward(b)
		if err != nil {
			t.Fatal(err)
		}
		want := grads(t, m)
		loss, tokens, err := g.Backward(b)
		if err != nil {
			t.Fatal(err)
		}
		got := grads(t, m)
		if tokens != wantTokens || math.Abs(loss-wantLoss) > 1e-6*wantLoss {
			t.Errorf("step %d: loss %v over %d tokens, want %v over %d", k, loss, tokens, wantLoss, wantTokens)
		}
		if d := relDiff(got, want); !(d < 1e-5) {
			t.Errorf("step %d: gradients %.2g (relative L2) off one process's", k, d)
		}
	}
}

// TestGroupDeterministic checks that the same batch on the same weights gives the same
// gradients bit for bit, and that a batch smaller than the group leaves workers idle.
func TestGroupDeterministic(t *testing.T) {
	m := model(t)
	step := train.NLLStep{Model: m}
	g := startGroup(t, step, 3)
	b := batch(5)
	var runs [][][]float64
	for range 2 {
		if _, _, err := g.Backward(b); err != nil {
			t.Fatal(err)
		}
		runs = append(runs, grads(t, m))
	}
	if d := relDiff(runs[1], runs[0]); d != 0 {
		t.Errorf("a second run's gradients differ by %.2g", d)
	}
	small := b[:2]
	wantLoss, _, err := step.Backward(small)
	if err != nil {
		t.Fatal(err)
	}
	want := grads(t, m)
	loss, _, err := g.Backward(small)
	if err != nil {
		t.Fatal(err)
	}
	if d := relDiff(grads(t, m), want); !(d < 1e-5) || math.Abs(loss-wantLoss) > 1e-6*wantLoss {
		t.Errorf("two turns on three processes: gradients %.2g off, loss %v want %v", d, loss, wantLoss)
	}
}

// TestWorkerKilled checks that a worker killed between steps fails the next step with
// ErrWorker and how it ended, and every step after.
func TestWorkerKilled(t *testing.T) {
	m := model(t)
	g := startGroup(t, train.NLLStep{Model: m}, 2)
	if err := g.workers[0].cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		_, _, err := g.Backward(batch(4))
		if !errors.Is(err, ErrWorker) || !strings.Contains(err.Error(), "killed") {
			t.Errorf("step after the worker was killed: %v, want ErrWorker saying it was killed", err)
		}
	}
}

// TestWorkerEndsWithInput checks that a worker exits cleanly when its leader closes its
// input, which is how a killed leader's workers end too.
func TestWorkerEndsWithInput(t *testing.T) {
	m := model(t)
	g := startGroup(t, train.NLLStep{Model: m}, 2)
	w := g.workers[0]
	w.in.Close()
	if err := w.cmd.Wait(); err != nil {
		t.Errorf("worker after its input closed: %v, want a clean exit", err)
	}
}

// TestWorkerOwnGroup checks that a worker runs in a process group of its own, so that
// a terminal's Ctrl-C, sent to the leader's group, interrupts the leader alone.
func TestWorkerOwnGroup(t *testing.T) {
	g := startGroup(t, train.NLLStep{Model: model(t)}, 2)
	pg, err := syscall.Getpgid(g.workers[0].cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if pg == syscall.Getpgrp() {
		t.Errorf("the worker is in the leader's process group %d", pg)
	}
}

// TestGroupFreesItsTensors checks that a group's steps and its Close leave no tensor
// handle behind.
func TestGroupFreesItsTensors(t *testing.T) {
	m := model(t)
	base := torch.Live()
	g, err := StartNLL(train.NLLStep{Model: m}, Config{Procs: 2, Threads: 1, Options: qwen2.Options{DType: "float32"}})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, _, err := g.Backward(batch(4)); err != nil {
			t.Fatal(err)
		}
	}
	g.Close()
	if got := torch.Live(); got != base {
		t.Errorf("live tensors = %d after the group closed, want %d", got, base)
	}
}

// sequences is n update samples of random ids behind a shared 6-token prompt, each
// response token with old and reference log-probs near -4 and an advantage.
func sequences(n int) []*train.Sequence {
	rng := rand.New(rand.NewPCG(3, 4))
	out := make([]*train.Sequence, n)
	for i, p := range batch(n) {
		s := &train.Sequence{Context: p.Context, Response: p.Response}
		for range p.Response {
			s.Old = append(s.Old, -4+float32(rng.NormFloat64())*0.1)
			s.Ref = append(s.Ref, -4+float32(rng.NormFloat64())*0.1)
			s.Adv = append(s.Adv, float32(rng.NormFloat64()))
		}
		out[i] = s
	}
	return out
}

// TestGroupMicrosMatchOneProcess checks that the micro-batches of a PPO mini-batch run
// across a leader and two workers give the stats and gradients of the same
// micro-batches run one after another in one process.
func TestGroupMicrosMatchOneProcess(t *testing.T) {
	m := model(t)
	obj := train.DefaultObjective
	obj.EntropyCoef = 0.01
	step := train.PPOStep{Model: m, Objective: obj, Temperature: 0.7, SharePrefixes: true}
	seqs := sequences(9)
	micros := [][]*train.Sequence{seqs[:2], seqs[2:5], seqs[5:6], seqs[6:]}
	tokens := 0
	for _, s := range seqs {
		tokens += len(s.Response)
	}
	div := float64(tokens)
	var want train.Stats
	for _, mi := range micros {
		s, err := step.Micro(mi, div)
		if err != nil {
			t.Fatal(err)
		}
		want = want.Merge(s)
	}
	wantGrads := grads(t, m)
	g, err := StartPPO(step, Config{Procs: 3, Threads: 1, Options: qwen2.Options{DType: "float32"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Close)
	got, err := g.Micros(micros, div)
	if err != nil {
		t.Fatal(err)
	}
	if d := relDiff(grads(t, m), wantGrads); !(d < 1e-5) {
		t.Errorf("gradients %.2g (relative L2) off one process's", d)
	}
	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"pg_loss", got.Loss, want.Loss}, {"clipfrac", got.ClipFrac, want.ClipFrac}, {"ppo_kl", got.PPOKL, want.PPOKL},
		{"kl", got.KL, want.KL}, {"entropy", got.Entropy, want.Entropy}, {"loss", got.Total, want.Total},
	} {
		if math.Abs(c.got-c.want) > 1e-5*math.Max(1, math.Abs(c.want)) {
			t.Errorf("%s = %v across the group, %v in one process", c.name, c.got, c.want)
		}
	}
	if got.Tokens != want.Tokens {
		t.Errorf("tokens = %d across the group, %d in one process", got.Tokens, want.Tokens)
	}
	if _, _, err := g.Backward(batch(3)); err == nil {
		t.Error("Backward on a PPO group: no error")
	}
}
