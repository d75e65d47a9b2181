package qwen2

import (
	"runtime"

	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/ts"

	"github.com/mempo/mempo/model/torch"
)

// rope holds the rotary tables for every position up to max_position_embeddings.
type rope struct {
	cos *ts.Tensor // [maxPositions, headDim] in the model dtype
	// sin is the sine table with its first half negated, so that rotate_half(x)·sin
	// is roll(x, headDim/2)·sin: negating a factor is exact, so the products are
	// bit for bit HF's [-x₂, x₁]·sin, in one op instead of four.
	sin *ts.Tensor // [maxPositions, headDim] in the model dtype
	d   int64      // headDim
}

// newRope builds the tables with the same float32 ops, in the same order, as HF's
// Qwen2RotaryEmbedding: inv_freq = 1 / theta^(arange(0, d, 2)/d), freqs =
// pos ⊗ inv_freq, emb = [freqs, freqs], then cos/sin cast to the model dtype
// (RoFormer, https://arxiv.org/abs/2104.09864). It runs once per model, so it uses
// gotch's generated ops despite their per-call slot leak (see model/torch/ops.go).
func newRope(c Config, dtype gotch.DType, dev gotch.Device) *rope {
	// Each generated op reads libtch's thread-local error in a second cgo call: keep
	// both on one OS thread (see model/torch's checked).
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	d := int64(c.HeadDim())
	idx := torch.Must(ts.ArangeStartStep(ts.IntScalar(0), ts.IntScalar(d), ts.IntScalar(2), gotch.Int64, gotch.CPU))
	e := torch.Must(idx.Totype(gotch.Float, true))
	e = torch.Must(e.DivScalar(ts.FloatScalar(float64(d)), true))
	p := torch.Must(ts.PowScalar(ts.FloatScalar(c.RopeTheta), e))
	e.MustDrop()
	inv := torch.Must(p.Reciprocal(true))
	pos := torch.Must(ts.Arange(ts.IntScalar(int64(c.MaxPositions)), gotch.Float, gotch.CPU))
	freqs := torch.Must(pos.Outer(inv, true))
	inv.MustDrop()
	emb := torch.Must(ts.Cat([]*ts.Tensor{freqs, freqs}, 1))
	freqs.MustDrop()
	cos := torch.Must(emb.Cos(false))
	sin := torch.Must(emb.Sin(true))
	cos = torch.Must(torch.Must(cos.Totype(dtype, true)).To(dev, true))
	sin = torch.Must(torch.Must(sin.Totype(dtype, true)).To(dev, true))
	defer sin.MustDrop()
	return &rope{cos: cos, sin: signHalf(sin), d: d}
}

// signHalf is x: [..., d] with its first d/2 entries of the last dimension negated.
func signHalf(x *ts.Tensor) *ts.Tensor {
	r := torch.Of(x)
	s := r.Size()
	d := s[len(s)-1]
	lo, hi := r.Narrow(-1, 0, d/2), r.Narrow(-1, d/2, d/2)
	n := lo.Neg()
	out := torch.RawCat([]torch.Raw{n, hi}, -1)
	lo.Free()
	hi.Free()
	n.Free()
	return out.Wrap()
}

// at gathers the tables at pos: [batch, seq] int64 into cos, sin: [batch, seq, 1,
// headDim], sin signed as in rope.sin.
func (r *rope) at(pos torch.Raw, b, t int64) (cos, sin torch.Raw) {
	flat := pos.Reshape(-1)
	d := r.d
	c, s := torch.Of(r.cos).IndexSelect(0, flat), torch.Of(r.sin).IndexSelect(0, flat)
	cos, sin = c.View(b, t, 1, d), s.View(b, t, 1, d)
	flat.Free()
	c.Free()
	s.Free()
	return cos, sin
}

// rotate applies the rotation to x: [batch, seq, heads, headDim] with Qwen2's
// rotate_half convention, x·cos + [-x₂, x₁]·sin where x₁, x₂ are the two halves of
// the last dimension (not interleaved pairs); cos, sin: [batch, seq, 1, headDim]
// from at. Same ops on the same values as HF's apply_rotary_pos_emb.
func rotate(x, cos, sin torch.Raw, p *pass) torch.Raw {
	d := p.headDim
	out := x.Mul(cos)
	rh := x.Roll(d / 2)
	rh = p.mul(rh, sin)
	out.Add_(rh)
	rh.Free()
	return out
}

func (r *rope) drop() { torch.Drop(r.cos, r.sin) }
