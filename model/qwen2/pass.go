package qwen2

import (
	"math"

	"github.com/mempo/mempo/model/torch"
	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/ts"
)

// pass is what every layer of one forward call shares.
type pass struct {
	b, t    int64 // rows and new tokens per row
	keys    int64 // key slots each query may read: cached + new
	headDim int64
	// cos, sin: [b, t, 1, headDim], the rotary tables at the tokens' positions with
	// sin signed as rope.sin.
	cos, sin torch.Raw
	// bias: [b, 1, t, keys] is added to the attention scores: 0 where a query may
	// attend, -inf elsewhere; bias5: [b, 1, 1, t, keys] is a view of it that
	// broadcasts over grouped query heads. The pass frees bias5, not bias.
	bias, bias5 torch.Raw
	// grad is set while autograd records ops: then ops whose input a backward formula
	// saves run out of place.
	grad bool
	// sdpa routes the attention of passes of more than one new token through
	// libtorch's fused kernel (Attention.attendFused).
	sdpa bool
	own  bool // bias belongs to the pass
}

// callerPass builds the pass of the exported per-layer Forward methods from HF's
// arguments: x: [b, t, hidden], cos, sin: [b, 1, t, headDim] and a boolean mask:
// [b, 1, t, keys].
func callerPass(x, cos, sin, mask *ts.Tensor, headDim int64) *pass {
	s, ms := torch.Of(x).Size(), torch.Of(mask).Size()
	p := &pass{b: s[0], t: s[1], keys: ms[3], headDim: headDim, grad: torch.GradEnabled()}
	signed := signHalf(sin)
	defer signed.MustDrop()
	p.cos, p.sin = torch.Of(cos).Transpose(1, 2), torch.Of(signed).Transpose(1, 2)
	p.bias = maskBias(torch.Of(mask), torch.Of(x).DType())
	p.bias5 = p.bias.View(p.b, 1, 1, p.t, p.keys)
	p.own = true
	return p
}

// newPass is the pass of b rows of t new tokens at positions pos: [b, t] int64, whose
// queries read keys slots under bias: [b, 1, t, keys], which the pass borrows. grad
// says whether autograd records.
func (m *Model) newPass(pos, bias torch.Raw, b, t, keys int64, grad bool) *pass {
	p := &pass{b: b, t: t, keys: keys, headDim: m.rope.d, bias: bias, grad: grad, sdpa: m.fuses(t, keys)}
	p.cos, p.sin = m.rope.at(pos, b, t)
	p.bias5 = bias.View(b, 1, 1, t, keys)
	return p
}

// fuses reports whether a pass of t new tokens per row over keys key slots attends
// through the fused kernel (Options.Attention).
func (m *Model) fuses(t, keys int64) bool { return t > 1 && t*keys >= m.fuseFrom }

// FusedAttention reports whether a model loaded with Options.Attention attention runs
// a pass of t new tokens per row over keys key slots through the fused kernel; false
// for an invalid value, which New refuses.
func FusedAttention(attention string, t, keys int64) bool {
	from, err := attentionFuseFrom(attention)
	return err == nil && (&Model{fuseFrom: from}).fuses(t, keys)
}

// free releases the pass's tensors.
func (p *pass) free() {
	torch.Free(p.cos, p.sin, p.bias5)
	if p.own {
		p.bias.Free()
	}
}

// maskBias turns a boolean mask (true = may attend) into the additive bias that
// SDPA's math path builds from it: 0 where true, -inf where false, in dtype dt.
func maskBias(mask torch.Raw, dt gotch.DType) torch.Raw {
	b := mask.Where(0, math.Inf(-1))
	if dt == gotch.Float {
		return b
	}
	defer b.Free()
	return b.ToDType(dt)
}

// mul is a·b, in a's storage unless autograd records; it consumes a.
func (p *pass) mul(a, b torch.Raw) torch.Raw {
	if p.grad {
		defer a.Free()
		return a.Mul(b)
	}
	a.Mul_(b)
	return a
}

// silu is silu(a), in a's storage unless autograd records; it consumes a.
func (p *pass) silu(a torch.Raw) torch.Raw {
	if p.grad {
		defer a.Free()
		return a.Silu()
	}
	a.Silu_()
	return a
}
