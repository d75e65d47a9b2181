// Package qwen2 is the Qwen2/Qwen2.5 decoder (https://arxiv.org/abs/2407.10671) on
// libtorch through gotch: HF config.json and safetensors checkpoints, a forward pass
// over right-padded batches with explicit positions and masks, a KV cache for
// incremental decoding, batched seeded sampling and chunked log-probs.
//
// Weight fields carry their HF safetensors key in an `st` tag; load.go walks the
// struct, so each key is written once, here.
package qwen2

import (
	"fmt"

	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/ts"
)

// Linear is y = x·Wᵀ + b.
type Linear struct {
	Weight *ts.Tensor `st:"weight"` // [out, in]
	Bias   *ts.Tensor `st:"bias"`   // [out], nil when the layer has no bias
}

// Forward maps x: [..., in] to [..., out].
func (l *Linear) Forward(x *ts.Tensor) *ts.Tensor {
	return linear(x, l.Weight, l.Bias)
}

// RMSNorm is x / sqrt(mean(x²) + eps) · weight, computed in float32 and cast back
// before the scale, exactly as HF's Qwen2RMSNorm.
type RMSNorm struct {
	Weight *ts.Tensor `st:"weight"` // [hidden]
	Eps    float64
}

// Forward normalises x: [..., hidden] over its last dimension.
func (n *RMSNorm) Forward(x *ts.Tensor) *ts.Tensor {
	xf := toDType(x, gotch.Float)
	sq := square(xf)
	v := meanLast(sq)
	ve := addScalar(v, n.Eps)
	r := rsqrt(ve)
	y := mul(xf, r)
	yt := toDType(y, x.DType())
	out := mul(n.Weight, yt)
	drop(xf, sq, v, ve, r, y, yt)
	return out
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
	size := x.MustSize()
	b, t := size[0], size[1]
	q := a.project(a.Q, x, a.heads, cos, sin)
	k := a.project(a.K, x, a.kvHeads, cos, sin)
	v := a.project(a.V, x, a.kvHeads, nil, nil)
	if kv != nil {
		k, v = kv.append(k, v)
	}
	if g := a.heads / a.kvHeads; g > 1 {
		k, v = repeatKV(k, g), repeatKV(v, g)
	}
	if ms := mask.MustSize(); ms[3] != k.MustSize()[2] || ms[2] != t {
		panic(fmt.Sprintf("attention: mask %v for %d queries over keys %v", ms, t, k.MustSize()))
	}
	o := sdpa(q, k, v, mask)
	ot := transpose(o, 1, 2)
	or := reshape(ot, b, t, a.heads*a.headDim)
	drop(q, k, v, o, ot)
	defer or.MustDrop()
	return a.O.Forward(or)
}

// project applies l to x: [batch, seq, hidden] and returns heads of
// [batch, heads, seq, headDim], rotated when cos is given.
func (a *Attention) project(l *Linear, x *ts.Tensor, heads int64, cos, sin *ts.Tensor) *ts.Tensor {
	size := x.MustSize()
	y := l.Forward(x)
	yv := view(y, size[0], size[1], heads, a.headDim)
	yt := transpose(yv, 1, 2)
	drop(y, yv)
	if cos == nil {
		return yt
	}
	defer yt.MustDrop()
	return rotate(yt, cos, sin)
}

// repeatKV expands x: [batch, kvHeads, seq, headDim] to [batch, kvHeads·g, seq,
// headDim] so query head h reads kv head h/g, as HF's repeat_kv; it drops x.
func repeatKV(x *ts.Tensor, g int64) *ts.Tensor {
	s := x.MustSize()
	u := unsqueeze(x, 2)
	e := expand(u, s[0], s[1], g, s[2], s[3])
	out := reshape(e, s[0], s[1]*g, s[2], s[3])
	drop(x, u, e)
	return out
}

// MLP is the SwiGLU feed-forward block: down(silu(gate(x)) · up(x)).
type MLP struct {
	Gate *Linear `st:"gate_proj"` // [intermediate, hidden]
	Up   *Linear `st:"up_proj"`   // [intermediate, hidden]
	Down *Linear `st:"down_proj"` // [hidden, intermediate]
}

// Forward maps x: [batch, seq, hidden] to [batch, seq, hidden].
func (m *MLP) Forward(x *ts.Tensor) *ts.Tensor {
	g := m.Gate.Forward(x)
	sg := silu(g)
	u := m.Up.Forward(x)
	h := mul(sg, u)
	drop(g, sg, u)
	defer h.MustDrop()
	return m.Down.Forward(h)
}

// DecoderLayer is one pre-norm transformer block.
type DecoderLayer struct {
	InputNorm *RMSNorm   `st:"input_layernorm"`
	Attn      *Attention `st:"self_attn"`
	PostNorm  *RMSNorm   `st:"post_attention_layernorm"`
	MLP       *MLP       `st:"mlp"`
}

// Forward maps x: [batch, seq, hidden] to [batch, seq, hidden] (see Attention.Forward
// for cos, sin, mask and kv).
func (l *DecoderLayer) Forward(x, cos, sin, mask *ts.Tensor, kv *layerCache) *ts.Tensor {
	n := l.InputNorm.Forward(x)
	a := l.Attn.Forward(n, cos, sin, mask, kv)
	n.MustDrop()
	r := add(x, a)
	a.MustDrop()
	n = l.PostNorm.Forward(r)
	m := l.MLP.Forward(n)
	out := add(r, m)
	drop(n, m, r)
	return out
}

// Model is the Qwen2 causal language model.
type Model struct {
	Config Config
	Embed  *ts.Tensor      `st:"model.embed_tokens.weight"` // [vocab, hidden]
	Layers []*DecoderLayer `st:"model.layers"`
	Norm   *RMSNorm        `st:"model.norm"`
	// LMHead is nil when tie_word_embeddings is set and the head reuses Embed.
	LMHead *Linear `st:"lm_head"` // [vocab, hidden], no bias

	rope   *rope
	device gotch.Device
	dtype  gotch.DType
}

// Hidden runs the decoder over ids: [batch, seq] int64 at positions pos: [batch,
// seq] int64 under mask: [batch, 1, seq, past+seq] bool and returns the final-norm
// hidden states [batch, seq, hidden]. With a cache, past = cache.Len(); the new
// keys and values are appended and the cache advances by seq.
func (m *Model) Hidden(ids, pos, mask *ts.Tensor, cache *Cache) *ts.Tensor {
	h := embedding(m.Embed, ids)
	cos, sin := m.rope.at(pos)
	for i, l := range m.Layers {
		var kv *layerCache
		if cache != nil {
			kv = cache.layer(i)
		}
		next := l.Forward(h, cos, sin, mask, kv)
		h.MustDrop()
		h = next
	}
	drop(cos, sin)
	if cache != nil {
		cache.advance(ids.MustSize()[1])
	}
	defer h.MustDrop()
	return m.Norm.Forward(h)
}

// Logits maps hidden states h: [..., hidden] to float32 logits [..., vocab].
func (m *Model) Logits(h *ts.Tensor) *ts.Tensor {
	w := m.Embed
	if m.LMHead != nil {
		w = m.LMHead.Weight
	}
	y := linear(h, w, nil)
	if y.DType() == gotch.Float {
		return y
	}
	defer y.MustDrop()
	return toDType(y, gotch.Float)
}

// Forward is Logits(Hidden(ids, pos, mask, cache)): float32 [batch, seq, vocab].
func (m *Model) Forward(ids, pos, mask *ts.Tensor, cache *Cache) *ts.Tensor {
	h := m.Hidden(ids, pos, mask, cache)
	defer h.MustDrop()
	return m.Logits(h)
}

// Device is where the weights live.
func (m *Model) Device() gotch.Device { return m.device }

// DType is the weights' dtype.
func (m *Model) DType() gotch.DType { return m.dtype }
