package qwen2

import (
	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/ts"
)

// rope holds the rotary tables for every position up to max_position_embeddings.
type rope struct {
	cos, sin *ts.Tensor // [maxPositions, headDim] in the model dtype
}

// newRope builds the tables with the same float32 ops, in the same order, as HF's
// Qwen2RotaryEmbedding: inv_freq = 1 / theta^(arange(0, d, 2)/d), freqs =
// pos ⊗ inv_freq, emb = [freqs, freqs], then cos/sin cast to the model dtype
// (RoFormer, https://arxiv.org/abs/2104.09864). It runs once per model, so it uses
// gotch's generated ops despite their per-call slot leak (see ops.go).
func newRope(c Config, dtype gotch.DType, dev gotch.Device) *rope {
	d := int64(c.HeadDim())
	idx := must(ts.ArangeStartStep(ts.IntScalar(0), ts.IntScalar(d), ts.IntScalar(2), gotch.Int64, gotch.CPU))
	e := must(idx.Totype(gotch.Float, true))
	e = must(e.DivScalar(ts.FloatScalar(float64(d)), true))
	p := must(ts.PowScalar(ts.FloatScalar(c.RopeTheta), e))
	e.MustDrop()
	inv := must(p.Reciprocal(true))
	pos := must(ts.Arange(ts.IntScalar(int64(c.MaxPositions)), gotch.Float, gotch.CPU))
	freqs := must(pos.Outer(inv, true))
	inv.MustDrop()
	emb := must(ts.Cat([]*ts.Tensor{freqs, freqs}, 1))
	freqs.MustDrop()
	cos := must(emb.Cos(false))
	sin := must(emb.Sin(true))
	return &rope{
		cos: must(must(cos.Totype(dtype, true)).To(dev, true)),
		sin: must(must(sin.Totype(dtype, true)).To(dev, true)),
	}
}

// at gathers the tables at pos: [batch, seq] int64 into cos, sin: [batch, 1, seq, headDim].
func (r *rope) at(pos *ts.Tensor) (cos, sin *ts.Tensor) {
	s := pos.MustSize()
	flat := reshape(pos, -1)
	d := r.cos.MustSize()[1]
	c, s2 := indexSelect(r.cos, 0, flat), indexSelect(r.sin, 0, flat)
	cos, sin = view(c, s[0], 1, s[1], d), view(s2, s[0], 1, s[1], d)
	drop(flat, c, s2)
	return cos, sin
}

// rotate applies the rotation to x: [batch, heads, seq, headDim] with Qwen2's
// rotate_half convention, x·cos + [-x₂, x₁]·sin where x₁, x₂ are the two halves of
// the last dimension (not interleaved pairs).
func rotate(x, cos, sin *ts.Tensor) *ts.Tensor {
	d := x.MustSize()[3]
	x1, x2 := narrow(x, 3, 0, d/2), narrow(x, 3, d/2, d/2)
	n2 := neg(x2)
	rh := cat([]*ts.Tensor{n2, x1}, 3)
	a, b := mul(x, cos), mul(rh, sin)
	out := add(a, b)
	drop(x1, x2, n2, rh, a, b)
	return out
}

func (r *rope) drop() { drop(r.cos, r.sin) }
