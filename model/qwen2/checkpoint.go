package qwen2

import (
	"fmt"

	"github.com/sugarme/gotch/ts"

	"github.com/mempo/mempo/model/torch"
)

// Activation checkpointing (Chen et al., arXiv 1604.06174) per decoder layer, as
// torch.utils.checkpoint does it, which libtorch's C++ API lacks: the forward pass runs
// without autograd and keeps only each layer's input; the backward pass recomputes one
// segment at a time from the top — the head chunk by chunk, then the final norm, then
// each layer from the last — with autograd, and backpropagates the gradient arriving at
// the segment's output to its input, a leaf. A training pass then holds L + 1 hidden
// states, one layer's activations and one chunk's logits instead of every layer's
// activations and every scored position's logits, for one more forward pass of the
// decoder. The weights' gradients accumulate as in the plain backward pass (in place
// into their gradient slots), and on the tiny preset on the CPU they equal it bit for
// bit (train's TestGradCheckpointMatches); they could differ in rounding only where
// the two gradient contributions of a layer's input (residual and norm) are summed in
// another order.

// Checkpointed is the state a checkpointed scoring pass keeps for its backward pass
// (LogProbTensorCheckpointed). Backward consumes it; Free releases what an abandoned
// one holds.
type Checkpointed struct {
	m       *Model
	cfg     ScoreConfig
	p       *pass
	bias    torch.Raw   // the pass's mask bias, which p borrows
	ids     torch.Raw   // [rows, width]
	inputs  []torch.Raw // inputs[i]: layer i's input [rows, width, hidden]; inputs[L]: the last layer's output
	idx     torch.Raw   // [n]: the flat slot predicting each scored token
	tgt     torch.Raw   // [n, 1]: the scored tokens
	lp, ent torch.Raw   // aliases of the leaves handed out; ent is the zero Raw without entropies
}

// LogProbTensorCheckpointed is LogProbTensor for training with activation
// checkpointing: the same log-probs and entropies, computed without autograd and
// returned as leaves that require grad. The caller builds its loss from them and calls
// Backward on the loss instead of backpropagating it, which recomputes the pass segment
// by segment and accumulates the weights' gradients; or, giving up, Free. The caller
// drops lp and ent either way.
func (m *Model) LogProbTensorCheckpointed(pairs []Pair, cfg ScoreConfig) (lp, ent *ts.Tensor, ck *Checkpointed, err error) {
	cfg = cfg.withDefaults()
	b, at, target, err := m.packPairs(pairs)
	if err != nil {
		return nil, nil, nil, err
	}
	n := int64(len(at))
	if n == 0 || len(pairs) == 0 {
		lp, ent = m.noScores(cfg)
		return lp, ent, &Checkpointed{}, nil
	}
	ck = &Checkpointed{m: m, cfg: cfg}
	defer func() {
		if err != nil {
			ck.Free()
			ck = nil
		}
	}()
	defer torch.Catch(fmt.Sprintf("checkpointed log-probs of %d pairs", len(pairs)), &err)
	defer torch.SetGrad(torch.SetGrad(false))

	var pos torch.Raw
	ck.ids, pos, ck.bias = b.inputs(m)
	rows, width := int64(b.rows), int64(b.width)
	ck.p = m.newPass(pos, ck.bias, rows, width, width, false)
	pos.Free()
	h := m.embed(ck.ids, false)
	ck.inputs = append(ck.inputs, h)
	for _, l := range m.Layers {
		h = l.forward(h, ck.p, nil, nil)
		ck.inputs = append(ck.inputs, h)
	}
	ck.idx = torch.RawFromHost(at, []int64{n}, m.device)
	ck.tgt = torch.RawFromHost(target, []int64{n, 1}, m.device)
	sel := ck.top(h)
	l, e := m.chunkLogProbs(sel, ck.tgt, cfg)
	sel.Free()
	ck.lp = l.Leaf()
	l.Free()
	lp = ck.lp.Alias().Wrap()
	if cfg.Entropy {
		ck.ent = e.Leaf()
		e.Free()
		ent = ck.ent.Alias().Wrap()
	}
	return lp, ent, ck, nil
}

// top is the final norm of the last layer's output h: [rows, width, hidden] at the
// scored slots: [n, hidden].
func (ck *Checkpointed) top(h torch.Raw) torch.Raw {
	hn := ck.m.Norm.forward(h, ck.p)
	flat := hn.Reshape(ck.p.b*ck.p.t, -1)
	defer torch.Free(hn, flat)
	return flat.IndexSelect(0, ck.idx)
}

// Backward backpropagates loss, built from the leaves LogProbTensorCheckpointed
// returned, into the weights' gradients, recomputing the pass segment by segment, and
// releases the pass. It runs with autograd on, on the thread that ran the forward pass.
func (ck *Checkpointed) Backward(loss *ts.Tensor) (err error) {
	defer ck.Free()
	if ck.m == nil {
		return nil // nothing was scored
	}
	defer torch.Catch("checkpointed backward", &err)
	defer torch.SetGrad(torch.SetGrad(true))
	torch.Check(loss.Backward())
	ck.p.grad = true

	g := ck.backwardTop()
	for i := len(ck.m.Layers) - 1; i >= 0; i-- {
		x := ck.inputs[i].Leaf()
		out := ck.m.Layers[i].forward(x, ck.p, nil, nil)
		torch.Backward([]torch.Raw{out}, []torch.Raw{g})
		torch.Free(out, g, ck.inputs[i+1])
		ck.inputs[i+1] = torch.Raw{}
		g = x.Grad()
		x.Free()
	}
	defer g.Free()
	if e := ck.m.embed(ck.ids, true); e.RequiresGrad() {
		torch.Backward([]torch.Raw{e}, []torch.Raw{g})
		e.Free()
	} else {
		e.Free()
	}
	return nil
}

// backwardTop backpropagates the leaves' gradients through the head, chunk by chunk
// from the last as autograd orders the chunks of one graph, and the final norm; it
// returns the gradient of the last layer's output.
func (ck *Checkpointed) backwardTop() torch.Raw {
	glp := ck.lp.Grad()
	defer glp.Free()
	var gent torch.Raw
	if ck.ent != (torch.Raw{}) {
		if defined, _ := ck.ent.GradIs(torch.None); defined {
			gent = ck.ent.Grad()
			defer gent.Free()
		}
	}
	L := len(ck.m.Layers)
	h := ck.inputs[L].Leaf()
	defer h.Free()
	sel := ck.top(h)
	defer sel.Free()
	n := sel.Size()[0]
	dsel := torch.RawZeros(sel.Size(), sel.DType(), ck.m.device)
	defer dsel.Free()
	chunk := int64(ck.cfg.Chunk)
	for s := (n - 1) / chunk * chunk; s >= 0; s -= chunk {
		c := min(chunk, n-s)
		part := sel.Narrow(0, s, c)
		hc := part.Leaf()
		part.Free()
		tc := ck.tgt.Narrow(0, s, c)
		l, e := ck.m.chunkLogProbs(hc, tc, ck.cfg)
		roots, grads := []torch.Raw{l}, []torch.Raw{glp.Narrow(0, s, c)}
		if gent != (torch.Raw{}) {
			roots, grads = append(roots, e), append(grads, gent.Narrow(0, s, c))
		}
		torch.Backward(roots, grads)
		dc, gc := dsel.Narrow(0, s, c), hc.Grad()
		dc.CopyFrom(gc)
		torch.Free(dc, gc, hc, tc, l)
		torch.Free(grads...)
		if e != (torch.Raw{}) {
			e.Free()
		}
	}
	torch.Backward([]torch.Raw{sel}, []torch.Raw{dsel})
	return h.Grad()
}

// Free releases what the pass still holds; Backward calls it, and it may be called
// again.
func (ck *Checkpointed) Free() {
	if ck == nil || ck.m == nil {
		return
	}
	if ck.p != nil {
		ck.p.free()
		ck.p = nil
	}
	for _, x := range append(ck.inputs, ck.bias, ck.ids, ck.idx, ck.tgt, ck.lp, ck.ent) {
		if x != (torch.Raw{}) {
			x.Free()
		}
	}
	*ck = Checkpointed{}
}
