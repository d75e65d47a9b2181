package qwen2

import (
	"fmt"
	"slices"

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
	k, v  raw // [batch, kvHeads, cap, headDim]
	cache *Cache
}

// NewCache allocates a cache for batch rows of up to capacity slots.
func (m *Model) NewCache(batch, capacity int) *Cache {
	c := &Cache{cap: int64(capacity), device: m.device}
	shape := []int64{int64(batch), int64(m.Config.NumKVHeads), int64(capacity), int64(m.Config.HeadDim())}
	for range m.Layers {
		c.layers = append(c.layers, layerCache{
			k:     rawZeros(shape, m.dtype, m.device),
			v:     rawZeros(shape, m.dtype, m.device),
			cache: c,
		})
	}
	return c
}

// Len is the number of filled slots.
func (c *Cache) Len() int { return int(c.len) }

// Cap is the number of slots.
func (c *Cache) Cap() int { return int(c.cap) }

func (c *Cache) layer(i int) *layerCache { return &c.layers[i] }

func (c *Cache) advance(n int64) { c.len += n }

// append writes k, v: [batch, kvHeads, seq, headDim] at the cache's current length
// and returns views of all filled slots including the new ones; the caller still
// owns k and v.
func (l *layerCache) append(k, v raw) (raw, raw) {
	start, n := l.cache.len, k.size()[2]
	if start+n > l.cache.cap {
		panic(fmt.Sprintf("kv cache: %d slots used + %d new exceeds capacity %d", start, n, l.cache.cap))
	}
	for _, p := range [2][2]raw{{l.k, k}, {l.v, v}} {
		dst := p[0].narrow(2, start, n)
		if ds, ss := dst.size(), p[1].size(); !slices.Equal(ds, ss) {
			dst.free()
			panic(fmt.Sprintf("kv cache: writing %v into slots %v", ss, ds))
		}
		dst.copyFrom(p[1])
		dst.free()
	}
	return l.k.narrow(2, 0, start+n), l.v.narrow(2, 0, start+n)
}

// Keep retains the given batch rows, in that order, and frees the others; the
// decode loop calls it to stop computing rows that have finished.
func (c *Cache) Keep(rows []int64) {
	idx := rawFromHost(rows, []int64{int64(len(rows))}, gotch.Int64, c.device)
	defer idx.free()
	for i := range c.layers {
		l := &c.layers[i]
		k, v := l.k.indexSelect(0, idx), l.v.indexSelect(0, idx)
		freeAll(l.k, l.v)
		l.k, l.v = k, v
	}
}

// Drop frees the cache's tensors.
func (c *Cache) Drop() {
	for i := range c.layers {
		l := &c.layers[i]
		if l.k.c != nil {
			freeAll(l.k, l.v)
		}
		l.k, l.v = raw{}, raw{}
	}
}
