package train

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/mempo/mempo/model/qwen2"
)

// qwen7B is Qwen2.5-7B's shape (its config.json) in bfloat16.
func qwen7B() qwen2.Config {
	return qwen2.Config{
		Architectures: []string{qwen2.Architecture}, HiddenSize: 3584, IntermediateSize: 18944, NumLayers: 28,
		NumHeads: 28, NumKVHeads: 4, RopeTheta: 1e6, MaxPositions: 32768, RMSNormEps: 1e-6, VocabSize: 152064,
		TorchDType: "bfloat16", HiddenAct: "silu",
	}
}

// h200 is one 141 GB GPU's memory.
const h200 = 141e9

// TestEstimateMemory7B: the static terms of a bfloat16 Qwen2.5-7B are 16 bytes per
// parameter (no float32 gradient copy) plus AdamW's scratch; checkpointing shrinks the
// activations and logits of a long pass and nothing else; fused attention (the
// default, auto, at 8k tokens) keeps under half the activations of materialised
// attention; on one 141 GB GPU an 8k-token pass fits with checkpointing and not
// without, and a pass that does not fit is refused naming the largest term and the
// flags that lower it. It logs the README's table (-v).
func TestEstimateMemory7B(t *testing.T) {
	c := qwen7B()
	P := c.NumParams()
	if P < 7.6e9 || P > 7.7e9 {
		t.Fatalf("Qwen2.5-7B shape has %d parameters, want 7.62B", P)
	}
	m := EstimateMemory(c, Shape{Rows: 1, Width: 8192, Scored: 512, Entropy: true, CUDA: true, Attention: "eager"})
	fused := EstimateMemory(c, Shape{Rows: 1, Width: 8192, Scored: 512, Entropy: true, CUDA: true})
	if !(fused.Activations < m.Activations/2) || !(fused.Transient <= m.Transient) || fused.Optimizer != m.Optimizer {
		t.Errorf("fused %+v vs materialised %+v: want under half the activations, no more transient, the state equal", fused, m)
	}
	if got, want := m.Weights+m.Grads+m.Optimizer, 16*P+8*gpuChunk; got != want {
		t.Errorf("static terms = %d bytes, want 16 per parameter + scratch = %d", got, want)
	}
	ck := EstimateMemory(c, Shape{Rows: 1, Width: 8192, Scored: 512, Entropy: true, CUDA: true, GradCheckpoint: true, Attention: "eager"})
	if !(ck.Activations < m.Activations/10) || ck.Weights != m.Weights || ck.Optimizer != m.Optimizer || ck.Transient != m.Transient {
		t.Errorf("checkpointed %+v vs plain %+v: want a tenth of the activations or less, the rest equal", ck, m)
	}
	err := m.Fit(h200, "cuda", "--micro-token-budget")
	if !errors.Is(err, ErrMemory) || !strings.Contains(err.Error(), "largest term is activations") || !strings.Contains(err.Error(), "--grad-checkpoint") {
		t.Errorf("Fit(141 GB) of an 8k pass without checkpointing = %v, want ErrMemory naming activations and --grad-checkpoint", err)
	}
	for _, attn := range []string{"eager", "auto"} {
		ck := EstimateMemory(c, Shape{Rows: 1, Width: 8192, Scored: 512, Entropy: true, CUDA: true, GradCheckpoint: true, Attention: attn})
		if err := ck.Fit(h200, "cuda", "--micro-token-budget"); err != nil {
			t.Errorf("Fit(141 GB) of an 8k pass with checkpointing, %s attention = %v, want nil", attn, err)
		}
	}
	// Checkpointed, a 16k pass fits with fused attention and not materialised, a 32k
	// pass not even fused; the state is the largest term but fits alone, so the fix
	// named is the pass.
	if err := EstimateMemory(c, Shape{Rows: 1, Width: 16384, Scored: 512, Entropy: true, CUDA: true, GradCheckpoint: true}).Fit(h200, "cuda", "--micro-token-budget"); err != nil {
		t.Errorf("Fit(141 GB) of a 16k pass with checkpointing and fused attention = %v, want nil", err)
	}
	long := EstimateMemory(c, Shape{Rows: 1, Width: 16384, Scored: 512, Entropy: true, CUDA: true, GradCheckpoint: true, Attention: "eager"})
	err = long.Fit(h200, "cuda", "--micro-token-budget")
	if !errors.Is(err, ErrMemory) || !strings.Contains(err.Error(), "largest term is optimizer") || !strings.Contains(err.Error(), "lower --micro-token-budget") {
		t.Errorf("Fit(141 GB) of a 16k pass with checkpointing, materialised = %v, want ErrMemory naming the optimizer and --micro-token-budget", err)
	}
	err = EstimateMemory(c, Shape{Rows: 1, Width: 32768, Scored: 512, Entropy: true, CUDA: true, GradCheckpoint: true}).Fit(h200, "cuda", "--micro-token-budget")
	if !errors.Is(err, ErrMemory) || !strings.Contains(err.Error(), "lower --micro-token-budget") {
		t.Errorf("Fit(141 GB) of a 32k pass with checkpointing, fused = %v, want ErrMemory naming --micro-token-budget", err)
	}

	var tab strings.Builder
	fmt.Fprintf(&tab, "static %s; per pass (activations + logits + transient), and whether the step fits 141 GB, "+
		"with attention materialised (eager) and as the default (auto) runs it:\n"+
		"| context | rows | scored | eager | fits | auto | fits | auto, `--grad-checkpoint` | fits |\n|---|---|---|---|---|---|---|---|---|\n",
		ByteSize(m.Weights+m.Grads+m.Optimizer))
	for _, w := range []int{1024, 2048, 4096, 8192, 16384, 32768} {
		seen := map[int]bool{}
		for _, rows := range []int{1, 8192 / w, 32768 / w} {
			if rows < 1 || seen[rows] {
				continue
			}
			seen[rows] = true
			s := Shape{Rows: rows, Width: w, Scored: rows * min(512, w/2), Entropy: true, CUDA: true, Attention: "eager"}
			e := EstimateMemory(c, s)
			s.Attention = "auto"
			p := EstimateMemory(c, s)
			s.GradCheckpoint = true
			q := EstimateMemory(c, s)
			pass := func(m Memory) string { return ByteSize(m.Activations + m.Logits + m.Transient) }
			fits := func(m Memory) string {
				if m.Fit(h200, "cuda", "--micro-token-budget") == nil {
					return "yes"
				}
				return "no"
			}
			fmt.Fprintf(&tab, "| %d | %d | %d | %s | %s | %s | %s | %s | %s |\n", w, rows, s.Scored, pass(e), fits(e), pass(p), fits(p), pass(q), fits(q))
		}
	}
	t.Log(tab.String())
}

// TestReplicaMemory checks what data-parallel workers add to an estimate: nothing in
// one process, and with three, two copies of the weights and their gradients and the
// shared weights, in the total, the line and the advice when they do not fit.
func TestReplicaMemory(t *testing.T) {
	m := Memory{Weights: 100 << 20, Grads: 100 << 20, Optimizer: 600 << 20, Activations: 50 << 20}
	if r := ReplicaMemory(m, 1); r != 0 {
		t.Errorf("one process adds %d bytes, want 0", r)
	}
	if s := m.String(); strings.Contains(s, "replicas") {
		t.Errorf("one process's estimate %q names replicas", s)
	}
	m.Replicas = ReplicaMemory(m, 3)
	if m.Replicas != 500<<20 || m.Total() != 1350<<20 {
		t.Errorf("three processes: replicas %d, total %d; want 500 MiB and 1350 MiB", m.Replicas, m.Total())
	}
	if s := m.String(); !strings.Contains(s, "replicas 500.0 MiB") {
		t.Errorf("estimate %q does not name the replicas' 500 MiB", s)
	}
	err := m.Fit(1<<30, "cpu", "--batch-tokens")
	if !errors.Is(err, ErrMemory) || !strings.Contains(err.Error(), "--procs") {
		t.Errorf("Fit in 1 GiB = %v, want ErrMemory advising fewer --procs", err)
	}
}
