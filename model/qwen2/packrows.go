package qwen2

import (
	"fmt"

	"github.com/mempo/mempo/model/torch"
)

// rowSlots names one row of a cache and the slots of it to keep, in order.
type rowSlots struct {
	from  *Cache
	row   int
	slots []int // at least one
}

// packRows returns a cache of capacity slots whose row i holds the slots of rows[i]
// packed from slot 0, in order; its length is the longest list. This is how a
// Decoder appends joining rows to its running cache and drops the slots rows left
// unused (slots of finished neighbours, or of a shorter prompt): one gather per run
// of rows from the same cache, the same index for every layer.
//
// Past its own slots, up to the new length, a row holds copies of its first slot:
// the mask hides them, and a hidden slot's attention weight is exactly zero, which
// times a finite value adds nothing. Slots past the length are left unset: decoding
// writes each slot before any attention reads it.
func (m *Model) packRows(rows []rowSlots, capacity int) *Cache {
	width := 0
	for _, r := range rows {
		width = max(width, len(r.slots))
	}
	if width > capacity {
		panic(fmt.Sprintf("kv cache: packing rows of up to %d slots into %d", width, capacity))
	}
	kvHeads, headDim := int64(m.Config.NumKVHeads), int64(m.Config.HeadDim())
	out := &Cache{len: int64(width), cap: int64(capacity), device: m.device}
	shape := []int64{int64(len(rows)), kvHeads, int64(capacity), headDim}
	for range m.Layers {
		out.layers = append(out.layers, layerCache{
			k: torch.RawEmpty(shape, m.dtype, m.device), v: torch.RawEmpty(shape, m.dtype, m.device), cache: out})
	}
	for lo := 0; lo < len(rows); {
		hi := lo + 1
		for hi < len(rows) && rows[hi].from == rows[lo].from {
			hi++
		}
		src := rows[lo].from
		// Row r, head h, slot s of the source is row (r·kvHeads + h)·slots + s of its
		// [rows·kvHeads·slots, headDim] view.
		slots := int(src.layers[0].k.Size()[2])
		idx := make([]int64, 0, (hi-lo)*int(kvHeads)*width)
		for _, r := range rows[lo:hi] {
			for h := range int(kvHeads) {
				base := (r.row*int(kvHeads) + h) * slots
				for w := range width {
					s := r.slots[0]
					if w < len(r.slots) {
						s = r.slots[w]
					}
					idx = append(idx, int64(base+s))
				}
			}
		}
		ix := torch.RawFromHost(idx, []int64{int64(len(idx))}, m.device)
		for i := range out.layers {
			dst, from := &out.layers[i], &src.layers[i]
			for _, p := range [2][2]torch.Raw{{dst.k, from.k}, {dst.v, from.v}} {
				flat := p[1].Reshape(-1, headDim)
				picked := flat.IndexSelect(0, ix)
				shaped := picked.View(int64(hi-lo), kvHeads, int64(width), headDim)
				rowsOf := p[0].Narrow(0, int64(lo), int64(hi-lo))
				into := rowsOf.Narrow(2, 0, int64(width))
				into.CopyFrom(shaped)
				torch.Free(flat, picked, shaped, rowsOf, into)
			}
		}
		ix.Free()
		lo = hi
	}
	return out
}
