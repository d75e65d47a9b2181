package qwen2

import (
	"github.com/mempo/mempo/model/torch"
	"github.com/sugarme/gotch/ts"
)

// fused holds one layer's projections concatenated along their output dimension,
// so a decode step runs one GEMM for q, k and v and one for gate and up: three
// fewer GEMM calls and four fewer libtorch ops per layer, whose fixed cost rivals
// the arithmetic of a batch-16 step (measured: DecodeTiny16 4% faster on one
// thread, about the run-to-run noise of the shared CI machine). Generate builds
// them from the current weights and frees them when it returns, so updates to the
// weights between calls are always seen; training and scoring keep the separate
// weights so gradients reach them. Each output column of a GEMM is the same dot
// product whether or not other columns are computed alongside; on this machine's
// libtorch the fused products match the separate ones bit for bit
// (TestFusedMatchesSeparate).
type fused struct {
	qkv, qkvBias torch.Raw // [(heads+2·kvHeads)·headDim, hidden], [(heads+2·kvHeads)·headDim]
	gateUp       torch.Raw // [2·intermediate, hidden]
	inter        int64     // intermediate size
}

// fuse concatenates every layer's projections; freeFused releases them.
func (m *Model) fuse() []fused {
	out := make([]fused, len(m.Layers))
	cat := func(ws ...*ts.Tensor) torch.Raw {
		rs := make([]torch.Raw, len(ws))
		for i, w := range ws {
			rs[i] = torch.Of(w)
		}
		return torch.RawCat(rs, 0)
	}
	for i, l := range m.Layers {
		a := l.Attn
		out[i] = fused{
			qkv:     cat(a.Q.Weight, a.K.Weight, a.V.Weight),
			qkvBias: cat(a.Q.Bias, a.K.Bias, a.V.Bias),
			gateUp:  cat(l.MLP.Gate.Weight, l.MLP.Up.Weight),
			inter:   int64(m.Config.IntermediateSize),
		}
	}
	return out
}

func freeFused(fs []fused) {
	for _, f := range fs {
		torch.Free(f.qkv, f.qkvBias, f.gateUp)
	}
}
