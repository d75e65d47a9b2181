package qwen2

import (
	"cmp"
	"math"
	"slices"

	"github.com/mempo/mempo/model/torch"
	"github.com/sugarme/gotch"
)

// rowPack is the host side of sequences packed into rows: several sequences share a
// row, each at positions 0, 1, … and attending only to its own earlier tokens (a
// block-diagonal causal mask), so each is computed as if it were alone while the
// padding a batch of rows of one width needs goes to what the rows cannot fill.
type rowPack struct {
	rows, width int
	ids, pos    []int64 // [rows·width]; padding is token 0 at position 0
	first       []int   // [rows·width]: the slot where the slot's sequence starts, -1 for padding
	slot        []int   // per sequence: the flat index of its first token
}

// packRows lays seqs (each at least one token) out in rows as wide as the longest,
// first fit in decreasing length order (ties in input order), so the layout depends
// only on the lengths. Training batches sampled at random mix lengths, and right
// padding every sequence to the longest wasted a large share of the slots; a batch of
// similar lengths packs one per row as before.
func packRows(seqs [][]int64) rowPack { return packGroups(seqs, nil) }

// packGroups is packRows where a row holds sequences of one group only (group[i] is
// sequence i's; nil puts all in one).
func packGroups(seqs [][]int64, group []int) rowPack {
	lengths := make([]int, len(seqs))
	for i, s := range seqs {
		lengths[i] = len(s)
	}
	var p rowPack
	p.slot, p.rows, p.width = place(lengths, group)
	p.ids = make([]int64, p.rows*p.width)
	p.pos = make([]int64, p.rows*p.width)
	p.first = make([]int, p.rows*p.width)
	for k := range p.first {
		p.first[k] = -1
	}
	for i, s := range seqs {
		for j, id := range s {
			k := p.slot[i] + j
			p.ids[k], p.pos[k], p.first[k] = id, int64(j), p.slot[i]
		}
	}
	return p
}

// PackShape is the rows and width of the batch that sequences of these lengths are
// packed into for one forward pass (as LogProbTensor packs them): rows·width token
// slots, padding included, which is what a training pass's memory grows with.
func PackShape(lengths []int) (rows, width int) {
	_, rows, width = place(lengths, nil)
	return rows, width
}

// place is packGroups' layout of sequences of these lengths and groups: each one's
// first flat slot, the rows and the width.
func place(lengths, group []int) (slot []int, rows, width int) {
	order := make([]int, len(lengths))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(lengths[b], lengths[a]) })
	slot = make([]int, len(lengths))
	if len(lengths) > 0 {
		width = lengths[order[0]]
	}
	var used, of []int // per row: slots taken, group
	for _, i := range order {
		g := 0
		if group != nil {
			g = group[i]
		}
		r := -1
		for k, u := range used {
			if u+lengths[i] <= width && of[k] == g {
				r = k
				break
			}
		}
		if r < 0 {
			r = len(used)
			used, of = append(used, 0), append(of, g)
		}
		slot[i] = r*width + used[r]
		used[r] += lengths[i]
	}
	return slot, len(used), width
}

// bias is the additive attention mask [rows, 1, width, width] as hidden takes it: 0
// where query q may read key k — k from q's sequence start up to q — and -inf
// elsewhere. A padding query reads key 0 only, so no softmax row is all -inf.
func (p rowPack) bias() []float32 {
	w := p.width
	out := make([]float32, p.rows*w*w)
	inf := float32(math.Inf(-1))
	for i := range out {
		out[i] = inf
	}
	for r := range p.rows {
		for q := range w {
			row := out[(r*w+q)*w : (r*w+q+1)*w]
			a := p.first[r*w+q]
			if a < 0 {
				row[0] = 0
				continue
			}
			for k := a - r*w; k <= q; k++ {
				row[k] = 0
			}
		}
	}
	return out
}

// inputs converts the pack to ids, pos: [rows, width] int64 and its bias in the
// model dtype on the model's device.
func (p rowPack) inputs(m *Model) (ids, pos, bias torch.Raw) {
	return p.inputsWith(m, p.bias(), p.width)
}

// inputsWith is inputs with another mask: mask: [rows, 1, width, keys] as bias takes
// it, for queries that read keys slots.
func (p rowPack) inputsWith(m *Model, mask []float32, keys int) (ids, pos, bias torch.Raw) {
	shape := []int64{int64(p.rows), int64(p.width)}
	ids = torch.RawFromHost(p.ids, shape, m.device)
	pos = torch.RawFromHost(p.pos, shape, m.device)
	bias = torch.RawFromHost(mask, []int64{int64(p.rows), 1, int64(p.width), int64(keys)}, m.device)
	if m.dtype != gotch.Float {
		f := bias
		defer f.Free()
		bias = f.ToDType(m.dtype)
	}
	return ids, pos, bias
}
