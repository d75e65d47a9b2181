package qwen2

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/mempo/mempo/model/torch/torchtest"
)

// refModel is a plain float64 Qwen2 forward pass written from the HF modeling code
// (modeling_qwen2.py: Qwen2RMSNorm, rotate_half, repeat_kv, Qwen2MLP), one token and
// one head at a time, to check the libtorch implementation's conventions: rotary
// halves, which kv head serves which query head, norm placement, tied head.
type refModel struct {
	c Config
	w map[string][]float64
}

func newRef(m *Model) refModel {
	w := map[string][]float64{}
	for k, b := range weightBytes(m) {
		f := make([]float64, len(b)/4)
		for i := range f {
			f[i] = float64(math.Float32frombits(uint32(b[4*i]) | uint32(b[4*i+1])<<8 | uint32(b[4*i+2])<<16 | uint32(b[4*i+3])<<24))
		}
		w[k] = f
	}
	return refModel{c: m.Config, w: w}
}

// linear computes W·x (+ b) for W: [out, in] row-major.
func (r refModel) linear(key string, x []float64, bias bool) []float64 {
	w := r.w[key+".weight"]
	out := make([]float64, len(w)/len(x))
	for o := range out {
		s := 0.0
		for i, v := range x {
			s += w[o*len(x)+i] * v
		}
		if bias {
			s += r.w[key+".bias"][o]
		}
		out[o] = s
	}
	return out
}

func (r refModel) norm(key string, x []float64) []float64 {
	ms := 0.0
	for _, v := range x {
		ms += v * v
	}
	s := 1 / math.Sqrt(ms/float64(len(x))+r.c.RMSNormEps)
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = v * s * r.w[key+".weight"][i]
	}
	return out
}

// rotate applies rotary embedding at position p to one head vector.
func (r refModel) rotate(x []float64, p int) []float64 {
	d := len(x)
	out := make([]float64, d)
	for i := 0; i < d/2; i++ {
		a := float64(p) * math.Pow(r.c.RopeTheta, -float64(2*i)/float64(d))
		c, s := math.Cos(a), math.Sin(a)
		out[i] = x[i]*c - x[i+d/2]*s
		out[i+d/2] = x[i+d/2]*c + x[i]*s
	}
	return out
}

// forward returns logits [pos][vocab] for one sequence.
func (r refModel) forward(seq []int64) [][]float64 {
	c := r.c
	h, d := c.HiddenSize, c.HeadDim()
	g := c.NumHeads / c.NumKVHeads
	xs := make([][]float64, len(seq))
	for t, tok := range seq {
		xs[t] = append([]float64(nil), r.w["model.embed_tokens.weight"][int(tok)*h:int(tok+1)*h]...)
	}
	for l := range c.NumLayers {
		p := "model.layers." + string(rune('0'+l)) + "."
		qs, ks, vs := make([][]float64, len(seq)), make([][]float64, len(seq)), make([][]float64, len(seq))
		for t, x := range xs {
			n := r.norm(p+"input_layernorm", x)
			qs[t] = r.linear(p+"self_attn.q_proj", n, true)
			ks[t] = r.linear(p+"self_attn.k_proj", n, true)
			vs[t] = r.linear(p+"self_attn.v_proj", n, true)
		}
		for t := range xs {
			o := make([]float64, h)
			for head := range c.NumHeads {
				kvh := head / g
				q := r.rotate(qs[t][head*d:(head+1)*d], t)
				scores := make([]float64, t+1)
				mx := math.Inf(-1)
				for s := 0; s <= t; s++ {
					k := r.rotate(ks[s][kvh*d:(kvh+1)*d], s)
					dot := 0.0
					for i := range q {
						dot += q[i] * k[i]
					}
					scores[s] = dot / math.Sqrt(float64(d))
					mx = max(mx, scores[s])
				}
				sum := 0.0
				for s := range scores {
					scores[s] = math.Exp(scores[s] - mx)
					sum += scores[s]
				}
				for s := range scores {
					for i := range d {
						o[head*d+i] += scores[s] / sum * vs[s][kvh*d+i]
					}
				}
			}
			a := r.linear(p+"self_attn.o_proj", o, false)
			for i := range a {
				xs[t][i] += a[i]
			}
			n := r.norm(p+"post_attention_layernorm", xs[t])
			gate, up := r.linear(p+"mlp.gate_proj", n, false), r.linear(p+"mlp.up_proj", n, false)
			for i := range gate {
				gate[i] = gate[i] / (1 + math.Exp(-gate[i])) * up[i]
			}
			m := r.linear(p+"mlp.down_proj", gate, false)
			for i := range m {
				xs[t][i] += m[i]
			}
		}
	}
	head := "model.embed_tokens"
	if !c.TieEmbedding {
		head = "lm_head"
	}
	out := make([][]float64, len(seq))
	for t, x := range xs {
		out[t] = r.linear(head, r.norm("model.norm", x), false)
	}
	return out
}

// TestMatchesReference compares libtorch float32 logits with the float64 reference,
// with attention materialised and fused (Options.Attention eager and sdpa). Weights
// use std 0.2 so activations are O(1) and the comparison is not trivially small;
// tolerance 1e-4 absolute covers float32 rounding through two layers (measured: 8e-6).
func TestMatchesReference(t *testing.T) {
	for _, tied := range []bool{true, false} {
		for _, attn := range []string{"eager", "sdpa"} {
			c := testConfig()
			c.InitializerRange = 0.2
			c.TieEmbedding = tied
			m := newTestModel(t, c, Options{Attention: attn})
			seq := torchtest.RandomTokens(rand.New(rand.NewPCG(3, 4)), 12, c.VocabSize)
			want := newRef(m).forward(seq)
			got := fullLogits(m, seq)
			worst, scale := 0.0, 0.0
			for p := range seq {
				for v := range want[p] {
					worst = max(worst, math.Abs(float64(got[p][v])-want[p][v]))
					scale = max(scale, math.Abs(want[p][v]))
				}
			}
			if worst > 1e-4 {
				t.Errorf("tied=%v attention=%s: max |logit - reference| = %g (logits up to %g), want <= 1e-4", tied, attn, worst, scale)
			}
			t.Logf("tied=%v attention=%s: max |logit - reference| = %g, max |logit| = %g", tied, attn, worst, scale)
		}
	}
}
