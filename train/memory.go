package train

import (
	"errors"
	"fmt"
	"strings"

	"github.com/mempo/mempo/model/qwen2"
)

// ErrMemory marks a training plan whose memory estimate exceeds what the device offers.
var ErrMemory = errors.New("training plan does not fit in memory")

// Shape is one forward and backward pass of training as the memory estimate sees it:
// the packed batch qwen2.LogProbTensor runs (sequences packed into Rows rows of Width
// slots, see qwen2.PackShape) and the positions that get logits.
type Shape struct {
	Rows, Width int // Rows·Width token slots, padding included
	// Keys is the most keys a query attends to when more than Width: a tree pass's
	// branch reads its trunk's keys before its own row's (qwen2.TreeShape).
	Keys int
	// Scored is the positions that get logits: the response tokens (SFT with a context
	// weight: every token but each sequence's first).
	Scored int
	// Entropy says the pass computes each scored position's entropy too (the update).
	Entropy bool
	// Chunk is the logits chunk (qwen2.ScoreConfig.Chunk); 0 means 256.
	Chunk int
	// GradCheckpoint runs the pass with activation checkpointing (qwen2.Checkpointed).
	GradCheckpoint bool
	// CUDA sizes AdamW's scratch for a GPU (gpuChunk) rather than the CPU (stepChunk).
	CUDA bool
	// Attention is the model's qwen2.Options.Attention: whether the pass materialises
	// its attention probabilities or runs the fused kernel.
	Attention string
}

// Memory is the estimated peak memory of a training step, in bytes, by term.
type Memory struct {
	Shape Shape
	DType string // the weights' torch_dtype
	// Weights: the parameters. Grads: the flat gradient buffer every parameter's
	// gradient is a view into. Optimizer: AdamW's moments, the float32 master weights
	// of a half-precision model, and its scratch.
	Weights, Grads, Optimizer int64
	// Activations: what autograd keeps for the backward pass of the decoder, the
	// final norm and the attention mask. Logits: the float32 logits it keeps for the
	// log-softmax (and entropy). Transient: the largest short-lived tensors of the
	// backward pass (attention-probability gradients, one chunk's logit gradients).
	Activations, Logits, Transient int64
	// Replicas: what data-parallel workers add (a caller sets it; see
	// ReplicaMemory). The activations are then the shares' together: the whole batch's.
	Replicas int64
}

// ReplicaMemory is what procs processes training one model data parallel
// (train/dataparallel) hold besides one process's estimate m: each worker's copy of
// the weights and its gradient region, and the shared copy of the weights, all of
// the weights' dtype.
func ReplicaMemory(m Memory, procs int) int64 {
	if procs < 2 {
		return 0
	}
	return int64(2*procs-1) * m.Weights
}

// EstimateMemory is the peak memory of one training step of a model of c (weights in
// c.TorchDType) over pass s, with the flat AdamW of flat.go. It counts the tensors this
// implementation keeps, op by op, so it is specific to it. With P = c.NumParams(), b the bytes of
// the weight dtype (2 or 4), L layers, H hidden, I intermediate, kvd = kv heads ·
// head_dim, nH heads, V vocab, T = Rows·Width token slots, W = max(Width, Keys), n scored
// positions, c = min(Chunk, n), e = 1 with entropies else 0:
//
//	weights     = b·P
//	grads       = b·P
//	optimizer   = 12·P + 4·(k + r)   (bf16/fp16: fp32 master, two fp32 moments, and scratch
//	                                 for the fp32 casts of the gradient, see normChunk)
//	            = 2b·P + 2b·k        (fp32: two moments), k = min(P, AdamW chunk) and
//	              r = min(P, max(AdamW chunk, normChunk)) scratch elements (on a CPU
//	              the update holds one chunk per thread: a few MiB more, not counted)
//	layer       = T·(8H + b·(6H + 2·kvd + 4I)) + b·nH·T·W
//	              (per layer: both RMSNorms keep their fp32 input and their normalised
//	              output, 2·(4 + 2b)·H per token; attention keeps the queries, keys and
//	              values as the matmuls reshape them and o_proj's input, b·(2H + 2·kvd);
//	              the MLP keeps gate, silu(gate), up and their product, 4b·I; the
//	              softmax keeps its probabilities, b·nH·W per token)
//	            = T·(8H + b·(9H + 4I)) + 4·nH·T   with fused attention (qwen2.FusedAttention
//	              of Width new tokens over W keys): it keeps the queries, the keys and
//	              values repeated to every query head, its output and o_proj's input,
//	              5b·H, and a float32 log-sum-exp per head, and no probabilities
//	top         = (4 + b)·T·H + b·n·H   (the final norm and the scored hidden states)
//	mask        = 4·T·W (+ b·T·W when b < 4)   (the additive mask, built in fp32)
//	activations = L·layer + top + mask
//	logits      = 4·n·V·(1 + e)          (each chunk's fp32 logits, and softmax for the entropy)
//	transient   = max(2b·nH·T·W, 3b·T·I) + c·V·(b + 8)   (fused: 3b·T·H for 2b·nH·T·W, the
//	              gradients of the queries and the repeated keys and values)
//
// With GradCheckpoint each layer keeps only its input and is recomputed in the
// backward pass, one at a time, and the logits are recomputed chunk by chunk:
//
//	activations = (L + 1)·b·T·H + b·T·W + layer + top + 2b·T·H + b·n·H
//	logits      = 4·c·V·(1 + e)
//
// The estimate is validated against the measured peak RSS of a step on the CPU
// (TestMemoryEstimate); on a GPU it omits the CUDA context and the caching
// allocator's fragmentation, typically a few GB.
func EstimateMemory(c qwen2.Config, s Shape) Memory {
	if s.Chunk <= 0 {
		s.Chunk = 256
	}
	b := int64(4)
	if c.TorchDType == "bfloat16" || c.TorchDType == "float16" {
		b = 2
	}
	P := c.NumParams()
	L, H, I := int64(c.NumLayers), int64(c.HiddenSize), int64(c.IntermediateSize)
	kvd, nH, V := int64(c.NumKVHeads*c.HeadDim()), int64(c.NumHeads), int64(c.VocabSize)
	T, W, n := int64(s.Rows)*int64(s.Width), int64(max(s.Width, s.Keys)), int64(s.Scored)
	ck := min(int64(s.Chunk), n)
	e := int64(0)
	if s.Entropy {
		e = 1
	}
	m := Memory{Shape: s, DType: c.TorchDType, Weights: b * P, Grads: b * P}

	chunk := stepChunk
	if s.CUDA {
		chunk = gpuChunk
	}
	k := min(P, chunk)
	if b == 2 {
		r := min(P, max(chunk, normChunk))
		m.Optimizer = 12*P + 4*(k+r)
	} else {
		m.Optimizer = 2*b*P + 2*b*k
	}

	layer := T*(8*H+b*(6*H+2*kvd+4*I)) + b*nH*T*W
	attnGrad := 2 * b * nH * T * W
	if qwen2.FusedAttention(s.Attention, int64(s.Width), W) {
		layer = T*(8*H+b*(9*H+4*I)) + 4*nH*T
		attnGrad = 3 * b * T * H
	}
	top := (4+b)*T*H + b*n*H
	mask := 4 * T * W
	if b < 4 {
		mask += b * T * W
	}
	if s.GradCheckpoint {
		m.Activations = (L+1)*b*T*H + b*T*W + layer + top + 2*b*T*H + b*n*H
		m.Logits = 4 * ck * V * (1 + e)
	} else {
		m.Activations = L*layer + top + mask
		m.Logits = 4 * n * V * (1 + e)
	}
	m.Transient = max(attnGrad, 3*b*T*I) + ck*V*(b+8)
	return m
}

// Pass is one forward and backward pass of a plan: its sequences' lengths (context and
// response) and its scored positions.
type Pass struct {
	Lengths []int
	Scored  int
	Keys    int // Shape.Keys: 0 unless a query reads more keys than its row holds
}

// passOf is the shape of the scoring pass over pairs (see scores): the sequences it
// packs, or the tree pass's trunks and branches when it shares prefixes (over whole
// sequences when whole is set, as qwen2.ScoreConfig.ShareScored groups them), and the
// tokens it scores.
func passOf(pairs []qwen2.Pair, share, whole bool) Pass {
	var p Pass
	for _, e := range pairs {
		p.Lengths = append(p.Lengths, len(e.Context)+len(e.Response))
		p.Scored += len(e.Response)
	}
	if share {
		p.Lengths, p.Keys = qwen2.TreeShape(pairs, whole)
	}
	return p
}

// PlanMemory is the estimate of the pass of passes that needs the most memory, each
// packed as LogProbTensor packs it (qwen2.PackShape); s sets everything but the rows,
// width and scored positions.
func PlanMemory(c qwen2.Config, s Shape, passes []Pass) Memory {
	var worst Memory
	for i, p := range passes {
		s.Rows, s.Width = qwen2.PackShape(p.Lengths)
		s.Scored, s.Keys = p.Scored, p.Keys
		if m := EstimateMemory(c, s); i == 0 || m.Total() > worst.Total() {
			worst = m
		}
	}
	return worst
}

// Total is the sum of the terms.
func (m Memory) Total() int64 {
	return m.Weights + m.Grads + m.Optimizer + m.Activations + m.Logits + m.Transient + m.Replicas
}

// terms names the terms in the order String prints them.
func (m Memory) terms() []struct {
	name string
	v    int64
} {
	return []struct {
		name string
		v    int64
	}{
		{"weights", m.Weights}, {"gradients", m.Grads}, {"optimizer", m.Optimizer},
		{"activations", m.Activations}, {"logits", m.Logits}, {"transient", m.Transient},
		{"replicas", m.Replicas},
	}
}

// Largest names the largest term and its bytes.
func (m Memory) Largest() (string, int64) {
	name, v := "", int64(-1)
	for _, t := range m.terms() {
		if t.v > v {
			name, v = t.name, t.v
		}
	}
	return name, v
}

// String is the estimate as one line: the total, then each term, then the pass.
func (m Memory) String() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "%s (", ByteSize(m.Total()))
	for i, t := range m.terms() {
		if t.name == "replicas" && t.v == 0 {
			continue
		}
		if i > 0 {
			sb.WriteString(", ")
		}
		fmt.Fprintf(&sb, "%s %s", t.name, ByteSize(t.v))
	}
	extra := ""
	if m.Shape.Keys > m.Shape.Width {
		extra = fmt.Sprintf(", up to %d keys a query", m.Shape.Keys)
	}
	if m.Shape.GradCheckpoint {
		extra += ", grad checkpoint"
	}
	fmt.Fprintf(&sb, ") for %s weights, largest pass %d×%d tokens with %d scored%s",
		m.DType, m.Shape.Rows, m.Shape.Width, m.Shape.Scored, extra)
	return sb.String()
}

// ByteSize renders bytes in GiB with two decimals, or in MiB or KiB below 1 GiB.
func ByteSize(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
}

// Fit checks the estimate against avail bytes (0: unknown, nothing is checked). A plan
// that does not fit is an ErrMemory error that names the largest term and what lowers
// it; batchFlag is the stage's flag that sets the tokens of one pass.
func (m Memory) Fit(avail int64, where, batchFlag string) error {
	if avail <= 0 || m.Total() <= avail {
		return nil
	}
	name, v := m.Largest()
	var fix string
	switch name {
	case "activations", "transient":
		fix = fmt.Sprintf("lower %s (fewer or shorter sequences per pass)", batchFlag)
		if !m.Shape.GradCheckpoint {
			fix += ", pass --grad-checkpoint"
		}
		if m.DType == "float32" {
			fix += ", or train in --dtype bfloat16 (half the activations)"
		}
	case "logits":
		fix = fmt.Sprintf("lower %s (fewer response tokens per pass)", batchFlag)
		if !m.Shape.GradCheckpoint {
			fix += " or pass --grad-checkpoint, which recomputes the logits chunk by chunk"
		}
	case "replicas":
		fix = "train with fewer --procs: each worker holds a copy of the weights and their gradients"
	default:
		static := m.Weights + m.Grads + m.Optimizer
		if static >= avail {
			fix = fmt.Sprintf("the weights, gradients and optimizer state alone take %s: the model needs a device with more memory",
				ByteSize(static))
			break
		}
		// The state fits and is the largest term, yet the pass does not fit beside it
		// (a 7B update with a long checkpointed pass): the pass is what to shrink.
		fix = fmt.Sprintf("the weights, gradients and optimizer state take %s, leaving %s for a pass of %s: lower %s",
			ByteSize(static), ByteSize(avail-static), ByteSize(m.Total()-static), batchFlag)
		if !m.Shape.GradCheckpoint {
			fix += " or pass --grad-checkpoint"
		}
	}
	if m.Replicas > 0 && name != "replicas" {
		fix += fmt.Sprintf("; or train with fewer --procs (their replicas take %s)", ByteSize(m.Replicas))
	}
	return fmt.Errorf("memory estimate %s exceeds the %s available on %s; the largest term is %s (%s): %s: %w",
		ByteSize(m.Total()), ByteSize(avail), where, name, ByteSize(v), fix, ErrMemory)
}
