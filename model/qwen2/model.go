// Package qwen2 is the Qwen2/Qwen2.5 decoder (https://arxiv.org/abs/2407.10671) on
// libtorch through gotch: HF config.json and safetensors checkpoints, a forward pass
// over right-padded batches with explicit positions and masks, a KV cache for
// incremental decoding, batched seeded sampling (Generate), a running batch whose
// rows join and leave between decode steps (Decoder) and chunked log-probs.
//
// Weight fields carry their HF safetensors key in an `st` tag; load.go walks the
// struct, so each key is written once, here.
package qwen2

import (
	"fmt"

	"github.com/mempo/mempo/model/torch"
	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/ts"
)

// Linear is y = x·Wᵀ + b.
type Linear struct {
	Weight *ts.Tensor `st:"weight"` // [out, in]
	Bias   *ts.Tensor `st:"bias"`   // [out], nil when the layer has no bias
}

// Forward maps x: [..., in] to [..., out].
func (l *Linear) Forward(x *ts.Tensor) *ts.Tensor { return l.forward(torch.Of(x)).Wrap() }

func (l *Linear) forward(x torch.Raw) torch.Raw {
	b := torch.None
	if l.Bias != nil {
		b = torch.Of(l.Bias)
	}
	return x.Linear(torch.Of(l.Weight), b)
}

// RMSNorm is x / sqrt(mean(x²) + eps) · weight, computed in float32 and cast back
// before the scale, exactly as HF's Qwen2RMSNorm.
type RMSNorm struct {
	Weight *ts.Tensor `st:"weight"` // [hidden]
	Eps    float64
}

// Forward normalises x: [..., hidden] over its last dimension.
func (n *RMSNorm) Forward(x *ts.Tensor) *ts.Tensor {
	return n.forward(torch.Of(x), &pass{grad: torch.GradEnabled()}).Wrap()
}

func (n *RMSNorm) forward(x torch.Raw, p *pass) torch.Raw {
	dt := x.DType()
	xf := x
	if dt != gotch.Float {
		xf = x.ToDType(gotch.Float)
	}
	sq := xf.Square()
	v := sq.MeanLast()
	sq.Free()
	v.AddScalar_(n.Eps) // neither mean nor add saves its output for backward
	v.Rsqrt_()
	y := xf.Mul(v)
	v.Free()
	if dt != gotch.Float {
		yt := y.ToDType(dt)
		torch.Free(y, xf)
		y = yt
	}
	return p.mul(y, torch.Of(n.Weight)) // y·weight is weight·y bit for bit
}

// MLP is the SwiGLU feed-forward block: down(silu(gate(x)) · up(x)).
type MLP struct {
	Gate *Linear `st:"gate_proj"` // [intermediate, hidden]
	Up   *Linear `st:"up_proj"`   // [intermediate, hidden]
	Down *Linear `st:"down_proj"` // [hidden, intermediate]
}

// Forward maps x: [batch, seq, hidden] to [batch, seq, hidden].
func (m *MLP) Forward(x *ts.Tensor) *ts.Tensor {
	return m.forward(torch.Of(x), &pass{grad: torch.GradEnabled()}, nil).Wrap()
}

// forward is Forward, through f's fused gate and up projection when f is not nil.
func (m *MLP) forward(x torch.Raw, p *pass, f *fused) torch.Raw {
	var g, u torch.Raw
	if f == nil {
		g, u = m.Gate.forward(x), m.Up.forward(x)
	} else {
		gu := x.Linear(f.gateUp, torch.None)
		g, u = gu.Narrow(-1, 0, f.inter), gu.Narrow(-1, f.inter, f.inter)
		gu.Free()
	}
	h := p.mul(p.silu(g), u)
	u.Free()
	defer h.Free()
	return m.Down.forward(h)
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
	p := callerPass(x, cos, sin, mask, l.Attn.headDim)
	defer p.free()
	return l.forward(torch.Of(x), p, storeOf(kv), nil).Wrap()
}

func (l *DecoderLayer) forward(x torch.Raw, p *pass, kv kvStore, f *fused) torch.Raw {
	n := l.InputNorm.forward(x, p)
	r := l.Attn.forward(n, p, kv, f)
	n.Free()
	r.Add_(x) // the residual x + attn, which commutes bit for bit; o_proj saves only its input
	n = l.PostNorm.forward(r, p)
	out := l.MLP.forward(n, p, f)
	n.Free()
	out.Add_(r)
	r.Free()
	return out
}

// store writes x's keys and values of this layer into kv and computes nothing else.
func (l *DecoderLayer) store(x torch.Raw, p *pass, kv kvStore) {
	n := l.InputNorm.forward(x, p)
	defer n.Free()
	l.Attn.store(n, p, kv)
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
	// fuseFrom is the fewest score elements per row and head (new tokens × key
	// slots) of a pass that attends through libtorch's fused kernel (Options.Attention).
	fuseFrom int64
}

// Hidden runs the decoder over ids: [batch, seq] int64 at positions pos: [batch,
// seq] int64 under mask: [batch, 1, seq, past+seq] bool and returns the final-norm
// hidden states [batch, seq, hidden]. With a cache, past = cache.Len(); the new
// keys and values are appended and the cache advances by seq.
func (m *Model) Hidden(ids, pos, mask *ts.Tensor, cache *Cache) *ts.Tensor {
	bias := maskBias(torch.Of(mask), m.dtype)
	defer bias.Free()
	return m.hidden(torch.Of(ids), torch.Of(pos), bias, cache, nil).Wrap()
}

// hidden is Hidden with the mask given as an additive bias: [b, 1, t, past+t] in
// the model dtype (see maskBias), through fused projections fs when not nil.
func (m *Model) hidden(ids, pos, bias torch.Raw, cache *Cache, fs []fused) torch.Raw {
	return m.layers(ids, pos, bias, cache, fs, true)
}

// fill runs ids into cache like hidden and returns nothing: the last layer computes
// only the keys and values later tokens read, not its attention, MLP or output. The
// memory pass's stitched trajectories read nothing of their trunks but the cache, so
// on the 4-layer tiny model this saves about a fifth of their forward.
func (m *Model) fill(ids, pos, bias torch.Raw, cache *Cache) {
	m.layers(ids, pos, bias, cache, nil, false)
}

// layers runs the decoder; with out unset it stops after the last layer's keys and
// values and returns the zero Raw.
func (m *Model) layers(ids, pos, bias torch.Raw, cache *Cache, fs []fused, out bool) torch.Raw {
	size := ids.Size()
	b, t := size[0], size[1]
	past := int64(0)
	if cache != nil {
		past = cache.len
	}
	if bs := bias.Size(); len(bs) != 4 || bs[0] != b || bs[1] != 1 || bs[2] != t || bs[3] != past+t {
		panic(fmt.Sprintf("attention: mask %v for ids %v after %d cached slots, want [%d 1 %d %d]", bs, size, past, b, t, past+t))
	}
	p := m.newPass(pos, bias, b, t, past+t, torch.GradEnabled())
	defer p.free()
	if !out && cache == nil {
		panic("decoder: a pass without outputs needs a cache to fill")
	}
	h := m.embed(ids, p.grad)
	defer func() { h.Free() }()
	for i, l := range m.Layers {
		var kv kvStore
		if cache != nil {
			kv = cache.layer(i)
		}
		if !out && i == len(m.Layers)-1 {
			l.store(h, p, kv)
			break
		}
		var f *fused
		if fs != nil {
			f = &fs[i]
		}
		next := l.forward(h, p, kv, f)
		h.Free()
		h = next
	}
	if cache != nil {
		cache.advance(t)
	}
	if !out {
		return torch.Raw{}
	}
	return m.Norm.forward(h, p)
}

// embed looks ids: [b, t] up in the embedding: [b, t, hidden]. While autograd
// records and the embedding is trained on the CPU, the backward pass adds the rows'
// gradients into its gradient in place (torch.EmbeddingInPlaceGrad), which saves a
// vocab × hidden tensor of fresh zeroed pages per backward and, with a tied head,
// autograd's out-of-place sum of the weight's two gradients. On a GPU the
// caching allocator already reuses memory, and index_add_ there sums with atomics in
// no fixed order, so autograd's deterministic backward stays.
func (m *Model) embed(ids torch.Raw, grad bool) torch.Raw {
	w := torch.Of(m.Embed)
	if grad && !m.device.IsCuda() && w.RequiresGrad() {
		return w.EmbeddingInPlaceGrad(ids)
	}
	return w.Embedding(ids)
}

// Logits maps hidden states h: [..., hidden] to float32 logits [..., vocab].
func (m *Model) Logits(h *ts.Tensor) *ts.Tensor { return m.logits(torch.Of(h)).Wrap() }

func (m *Model) logits(h torch.Raw) torch.Raw {
	w := torch.Of(m.Embed)
	if m.LMHead != nil {
		w = torch.Of(m.LMHead.Weight)
	}
	var y torch.Raw
	if w.RequiresGrad() && torch.GradEnabled() {
		// The head's weight gradient goes into its gradient in place
		// (torch.LinearInPlaceGrad), not into a fresh vocab × hidden tensor per
		// backward that autograd then adds into it.
		y = h.LinearInPlaceGrad(w)
	} else {
		y = h.Linear(w, torch.None)
	}
	if m.dtype == gotch.Float {
		return y
	}
	defer y.Free()
	return y.ToDType(gotch.Float)
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
