package qwen2

import (
	"fmt"
	"math"

	"github.com/mempo/mempo/model/torch"
	"github.com/sugarme/gotch/ts"
)

// Attentions are the values of Options.Attention: how a pass of more than one new
// token per row attends (decoding steps always materialise their one row of scores).
//   - "eager" materialises each head's scores and probabilities, [t, keys] per row
//     and head, as HF's eager attention does;
//   - "sdpa" calls libtorch's scaled_dot_product_attention (Attention.attendFused);
//   - "auto", the default, fuses passes whose rows hold at least autoFuseFrom score
//     elements per head and materialises the others.
//
// The kernels agree to float rounding (TestFusedAttentionMatches), not bit for bit,
// so the choice is part of what a stage's outputs depend on.
var Attentions = []string{"auto", "eager", "sdpa"}

// autoFuseFrom is where "auto" starts fusing: 2048 new tokens over 2048 key slots.
// BenchmarkAttentionLong, one decoder layer of Qwen2.5-0.5B's widths on two CPU
// threads (libtorch 2.11): at 1k tokens fused attention scored 7% faster and trained
// 5% slower; at 4k 4% and 8% faster with a tenth and a fifth of the peak memory;
// at 8k 18% and 18% faster with a twentieth and a ninth (0.36 against 7.3 GB scoring).
// Below it (the tiny preset's 128-token batches) the materialised products were 4-12%
// faster.
const autoFuseFrom = 2048 * 2048

// attentionFuseFrom is Model.fuseFrom for an Options.Attention value.
func attentionFuseFrom(name string) (int64, error) {
	switch name {
	case "", "auto":
		return autoFuseFrom, nil
	case "eager":
		return math.MaxInt64, nil
	case "sdpa":
		return 0, nil
	}
	return 0, fmt.Errorf("attention %q: want auto, eager or sdpa", name)
}

// CheckAttention accepts the Options.Attention values and "" (auto).
func CheckAttention(name string) error {
	_, err := attentionFuseFrom(name)
	return err
}

// Attention is grouped-query self-attention with biased q/k/v projections and
// rotary position embeddings.
type Attention struct {
	Q *Linear `st:"q_proj"` // [heads·headDim, hidden] with bias
	K *Linear `st:"k_proj"` // [kvHeads·headDim, hidden] with bias
	V *Linear `st:"v_proj"` // [kvHeads·headDim, hidden] with bias
	O *Linear `st:"o_proj"` // [hidden, heads·headDim], no bias

	heads, kvHeads, headDim int64
}

// Forward attends x: [batch, seq, hidden] at rotary tables cos, sin: [batch, 1, seq,
// headDim] under mask: [batch, 1, seq, past+seq] (true = may attend). With a cache,
// this layer's keys and values are written at slots [past, past+seq) and the
// queries attend to all past+seq slots. It returns [batch, seq, hidden].
func (a *Attention) Forward(x, cos, sin, mask *ts.Tensor, kv *layerCache) *ts.Tensor {
	p := callerPass(x, cos, sin, mask, a.headDim)
	defer p.free()
	return a.forward(torch.Of(x), p, storeOf(kv), nil).Wrap()
}

// kvStore is where a layer's new keys and values go and what the queries read: a
// decoding cache (layerCache), or the link between a tree pass's trunk and branch
// forwards (sharedKV). append takes k, v: [b, kvHeads, t, headDim], which the caller
// still owns, and returns the keys and values to attend over, [b, kvHeads, keys,
// headDim], which the caller frees.
type kvStore interface {
	append(k, v torch.Raw) (torch.Raw, torch.Raw)
}

// storeOf is kv as a kvStore: nil (no store) when kv is nil.
func storeOf(kv *layerCache) kvStore {
	if kv == nil {
		return nil
	}
	return kv
}

// forward is Forward on x: [b, t, hidden] with the pass's tables and mask, through
// f's fused projections when f is not nil.
func (a *Attention) forward(x torch.Raw, p *pass, kv kvStore, f *fused) torch.Raw {
	q, k, v := a.qkv(x, p, f)
	keys, vals := a.stored(k, v, kv)
	o := a.attend(q, keys, vals, p)
	torch.Free(q, keys, vals)
	defer o.Free()
	return a.O.forward(o)
}

// store appends x's keys and values to kv, computed as forward computes them
// without fused projections (bit for bit), and computes no queries or attention.
func (a *Attention) store(x torch.Raw, p *pass, kv kvStore) {
	k, v := a.keyValue(x, p)
	keys, vals := a.stored(k, v, kv)
	torch.Free(keys, vals)
}

// stored takes k, v: [b, t, kvHeads, headDim], which it frees, to the keys and values
// the queries attend over, [b, kvHeads, keys, headDim], which the caller frees: k and
// v themselves, or all of kv's slots once they are appended there.
func (a *Attention) stored(k, v torch.Raw, kv kvStore) (keys, vals torch.Raw) {
	keys, vals = k.Transpose(1, 2), v.Transpose(1, 2)
	torch.Free(k, v)
	if kv == nil {
		return keys, vals
	}
	defer torch.Free(keys, vals)
	return kv.append(keys, vals)
}

// scale is what queries and keys are each multiplied by (see qkv).
func (a *Attention) scale() float64 { return math.Sqrt(1 / math.Sqrt(float64(a.headDim))) }

// qkv projects x: [b, t, hidden] to queries [b, t, heads, headDim] and keys and
// values [b, t, kvHeads, headDim], queries and keys rotated and scaled. SDPA's math
// path, which the batched forward used, multiplies queries and keys each by
// sqrt(1/sqrt(headDim)) before their product; so does this, and the cache keeps
// the scaled keys.
func (a *Attention) qkv(x torch.Raw, p *pass, f *fused) (q, k, v torch.Raw) {
	scale := a.scale()
	if f == nil {
		q = a.project(a.Q, x, a.heads, p, true)
		q.MulScalar_(scale) // rotate's last op, add_, saves nothing for backward
		k, v = a.keyValue(x, p)
		return q, k, v
	}
	y := x.Linear(f.qkv, f.qkvBias)
	yv := y.View(p.b, p.t, a.heads+2*a.kvHeads, a.headDim)
	qk := yv.Narrow(2, 0, a.heads+a.kvHeads)
	r := rotate(qk, p.cos, p.sin, p)
	r.MulScalar_(scale)
	q, k = r.Narrow(2, 0, a.heads), r.Narrow(2, a.heads, a.kvHeads)
	v = yv.Narrow(2, a.heads+a.kvHeads, a.kvHeads)
	torch.Free(y, yv, qk, r)
	return q, k, v
}

// keyValue is qkv's keys and values without fused projections.
func (a *Attention) keyValue(x torch.Raw, p *pass) (k, v torch.Raw) {
	k = a.project(a.K, x, a.kvHeads, p, true)
	k.MulScalar_(a.scale())
	return k, a.project(a.V, x, a.kvHeads, p, false)
}

// project applies l to x: [b, t, hidden] and returns heads of [b, t, heads, headDim],
// rotated when rot is set.
func (a *Attention) project(l *Linear, x torch.Raw, heads int64, p *pass, rot bool) torch.Raw {
	y := l.forward(x)
	yv := y.View(p.b, p.t, heads, a.headDim)
	y.Free()
	if !rot {
		return yv
	}
	defer yv.Free()
	return rotate(yv, p.cos, p.sin, p)
}

// attend is softmax(q·kᵀ + bias)·v for scaled q: [b, t, heads, headDim] and the
// scaled keys and the values, [b, kvHeads, keys, headDim]; it returns [b, t,
// heads·headDim]. Query head h reads kv head h/g (g = heads/kvHeads), as HF's
// repeat_kv arranges, but through a [b, kvHeads, g·t, headDim] arrangement of the
// queries: each cached key and value is read once per layer instead of being
// copied g times and read g times. Decoding at batch 16 is bound by those reads
// (0.9 MB per layer of the tiny model at 114 slots, 120 µs each from memory).
//
// With one new token per row the product per kv head has g query rows where SDPA
// had one per head, and libtorch's one-row product rounds differently in the last
// bits: decode logits differ from per-head attention by at most 1e-6 on the tiny
// model (generated tokens were identical; see TestGenerateGolden).
func (a *Attention) attend(q, keys, vals torch.Raw, p *pass) torch.Raw {
	g := a.heads / a.kvHeads
	if p.sdpa && p.t > 1 {
		return a.attendFused(q, keys, vals, p, g)
	}
	kt := keys.Transpose(2, 3) // [b, kvHeads, headDim, keys]
	defer kt.Free()
	if p.t == 1 {
		qg := q.View(p.b, a.kvHeads, g, a.headDim)
		o := a.scores(qg, kt, vals, p, g) // [b, kvHeads, g, headDim]
		qg.Free()
		defer o.Free()
		return o.View(p.b, 1, a.heads*a.headDim)
	}
	qt := q.Transpose(1, 2) // [b, heads, t, headDim]
	qg := qt.Reshape(p.b, a.kvHeads, g*p.t, a.headDim)
	o := a.scores(qg, kt, vals, p, g) // [b, kvHeads, g·t, headDim]
	torch.Free(qt, qg)
	ov := o.View(p.b, a.heads, p.t, a.headDim)
	ot := ov.Transpose(1, 2)
	out := ot.Reshape(p.b, p.t, a.heads*a.headDim)
	torch.Free(o, ov, ot)
	return out
}

// scores is softmax(q·kt + bias)·v for q: [b, kvHeads, g·t, headDim] (query rows
// grouped by head, then by token), kt: [b, kvHeads, headDim, keys] and vals:
// [b, kvHeads, keys, headDim]; it returns [b, kvHeads, g·t, headDim].
func (a *Attention) scores(q, kt, vals torch.Raw, p *pass, g int64) torch.Raw {
	s := q.Matmul(kt) // [b, kvHeads, g·t, keys]
	// matmul saves its inputs, not its output, so the bias may go in place.
	if p.t == 1 {
		s.Add_(p.bias) // [b, 1, 1, keys] broadcasts over every query row
	} else {
		s5 := s.View(p.b, a.kvHeads, g, p.t, p.keys)
		s5.Add_(p.bias5)
		s5.Free()
	}
	w := s.SoftmaxLast()
	s.Free()
	defer w.Free()
	return w.Matmul(vals)
}

// attendFused is attend through libtorch's scaled_dot_product_attention, whose CPU
// kernel (flash attention, libtorch 2.3 and later) walks the keys in blocks with an
// online softmax and keeps only each query's log-sum-exp for backward: it never
// materialises the [heads, t, keys] scores and probabilities that attend's products
// hold, which beyond a few thousand tokens are most of a pass's memory. The kernel
// takes as many key heads as query heads, so each kv head's keys and values are
// repeated g times first, as HF's repeat_kv does: [b, heads, keys, headDim], a copy
// far smaller than the scores.
func (a *Attention) attendFused(q, keys, vals torch.Raw, p *pass, g int64) torch.Raw {
	kr, vr := repeatKV(keys, g), repeatKV(vals, g)
	qt := q.Transpose(1, 2) // [b, heads, t, headDim]
	o := qt.Attention(kr, vr, p.bias)
	torch.Free(kr, vr, qt)
	ot := o.Transpose(1, 2)
	out := ot.Reshape(p.b, p.t, a.heads*a.headDim)
	torch.Free(o, ot)
	return out
}

// repeatKV repeats each head of x: [b, kvHeads, keys, headDim] g times in a row:
// [b, kvHeads·g, keys, headDim], head h of the result being x's head h/g.
func repeatKV(x torch.Raw, g int64) torch.Raw {
	s := x.Size()
	x5 := x.Reshape(s[0], s[1], 1, s[2], s[3])
	e := x5.Expand(s[0], s[1], g, s[2], s[3])
	r := e.Reshape(s[0], s[1]*g, s[2], s[3])
	torch.Free(x5, e)
	return r
}
