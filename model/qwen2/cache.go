package qwen2

import (
	"fmt"
	"slices"

	"github.com/mempo/mempo/model/torch"
	"github.com/sugarme/gotch"
)

// Cache holds every layer's keys and values for incremental decoding, preallocated
// to a fixed number of slots so appending a token copies only that token. Slot s of
// every row holds the token fed at step s of that row; which slots a query may see
// is the mask's business (see Batch), so rows of different lengths share slots.
// Keys are stored already multiplied by the attention's query/key scale (see
// Attention.qkv). A Cache is owned by one decode loop; Drop frees it.
type Cache struct {
	layers   []layerCache
	len, cap int64
	device   gotch.Device
}

type layerCache struct {
	k, v  torch.Raw // [batch, kvHeads, cap, headDim]
	cache *Cache
}

// NewCache allocates a cache for batch rows of up to capacity slots.
func (m *Model) NewCache(batch, capacity int) *Cache {
	c := &Cache{cap: int64(capacity), device: m.device}
	shape := []int64{int64(batch), int64(m.Config.NumKVHeads), int64(capacity), int64(m.Config.HeadDim())}
	for range m.Layers {
		c.layers = append(c.layers, layerCache{
			k:     torch.RawZeros(shape, m.dtype, m.device),
			v:     torch.RawZeros(shape, m.dtype, m.device),
			cache: c,
		})
	}
	return c
}

// Len is the number of filled slots.
func (c *Cache) Len() int { return int(c.len) }

func (c *Cache) layer(i int) *layerCache { return &c.layers[i] }

func (c *Cache) advance(n int64) { c.len += n }

// append writes k, v: [batch, kvHeads, seq, headDim] at the cache's current length
// and returns views of all filled slots including the new ones; the caller still
// owns k and v.
func (l *layerCache) append(k, v torch.Raw) (torch.Raw, torch.Raw) {
	start, n := l.cache.len, k.Size()[2]
	if start+n > l.cache.cap {
		panic(fmt.Sprintf("kv cache: %d slots used + %d new exceeds capacity %d", start, n, l.cache.cap))
	}
	for _, p := range [2][2]torch.Raw{{l.k, k}, {l.v, v}} {
		dst := p[0].Narrow(2, start, n)
		if ds, ss := dst.Size(), p[1].Size(); !slices.Equal(ds, ss) {
			dst.Free()
			panic(fmt.Sprintf("kv cache: writing %v into slots %v", ss, ds))
		}
		dst.CopyFrom(p[1])
		dst.Free()
	}
	return l.k.Narrow(2, 0, start+n), l.v.Narrow(2, 0, start+n)
}

// head is a view of c's first rows rows: it shares c's storage and starts at c's
// length, and a pass through it advances the view, not c. Drop frees the view only.
func (c *Cache) head(rows int) *Cache {
	v := &Cache{len: c.len, cap: c.cap, device: c.device}
	for _, l := range c.layers {
		v.layers = append(v.layers, layerCache{k: l.k.Narrow(0, 0, int64(rows)), v: l.v.Narrow(0, 0, int64(rows)), cache: v})
	}
	return v
}

// Keep retains the given batch rows, in that order, and frees the others; the
// decode loop calls it to stop computing rows that have finished.
func (c *Cache) Keep(rows []int64) {
	idx := torch.RawFromHost(rows, []int64{int64(len(rows))}, c.device)
	defer idx.Free()
	for i := range c.layers {
		l := &c.layers[i]
		k, v := l.k.IndexSelect(0, idx), l.v.IndexSelect(0, idx)
		torch.Free(l.k, l.v)
		l.k, l.v = k, v
	}
}

// copyRows returns a new cache of the given rows of c, in that order, with c's first
// filled slots (at most c.Len()) and room for capacity slots in all.
func (c *Cache) copyRows(rows []int64, filled, capacity int) *Cache {
	out := &Cache{len: int64(filled), cap: int64(capacity), device: c.device}
	idx := torch.RawFromHost(rows, []int64{int64(len(rows))}, c.device)
	defer idx.Free()
	for _, l := range c.layers {
		nl := layerCache{cache: out}
		for _, p := range [2]struct {
			dst *torch.Raw
			src torch.Raw
		}{{&nl.k, l.k}, {&nl.v, l.v}} {
			size := p.src.Size()
			*p.dst = torch.RawZeros([]int64{int64(len(rows)), size[1], out.cap, size[3]}, p.src.DType(), c.device)
			src := p.src.Narrow(2, 0, out.len)
			picked := src.IndexSelect(0, idx)
			dst := p.dst.Narrow(2, 0, out.len)
			dst.CopyFrom(picked)
			torch.Free(src, picked, dst)
		}
		out.layers = append(out.layers, nl)
	}
	return out
}

// Drop frees the cache's tensors; a second Drop does nothing.
func (c *Cache) Drop() {
	for _, l := range c.layers {
		torch.Free(l.k, l.v)
	}
	c.layers = nil
}
