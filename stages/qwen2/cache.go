package qwen2

import (
	"fmt"

	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/ts"
)

// Cache holds every layer's keys and values for incremental decoding, preallocated
// to a fixed number of slots so appending a token copies only that token. Slot s of
// every row holds the token fed at step s of that row; which slots a query may see
// is the mask's business (see Batch), so rows of different lengths share slots.
// A Cache is owned by one decode loop; Drop frees it.
type Cache struct {
	layers   []layerCache
	len, cap int64
}

type layerCache struct {
	k, v  *ts.Tensor // [batch, kvHeads, cap, headDim]
	cache *Cache
}

// NewCache allocates a cache for batch rows of up to capacity slots.
func (m *Model) NewCache(batch, capacity int) *Cache {
	c := &Cache{cap: int64(capacity)}
	shape := []int64{int64(batch), int64(m.Config.NumKVHeads), int64(capacity), int64(m.Config.HeadDim())}
	for range m.Layers {
		c.layers = append(c.layers, layerCache{
			k:     zeros(shape, m.dtype, m.device),
			v:     zeros(shape, m.dtype, m.device),
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

// append writes k, v: [batch, kvHeads, seq, headDim] at the cache's current length,
// drops them, and returns views of all filled slots including the new ones.
func (l *layerCache) append(k, v *ts.Tensor) (*ts.Tensor, *ts.Tensor) {
	start, n := l.cache.len, k.MustSize()[2]
	if start+n > l.cache.cap {
		panic(fmt.Sprintf("kv cache: %d slots used + %d new exceeds capacity %d", start, n, l.cache.cap))
	}
	for _, p := range [][2]*ts.Tensor{{l.k, k}, {l.v, v}} {
		dst := narrow(p[0], 2, start, n)
		if ds, ss := dst.MustSize(), p[1].MustSize(); fmt.Sprint(ds) != fmt.Sprint(ss) {
			panic(fmt.Sprintf("kv cache: writing %v into slots %v", ss, ds))
		}
		dst.Copy_(p[1])
		drop(dst, p[1])
	}
	return narrow(l.k, 2, 0, start+n), narrow(l.v, 2, 0, start+n)
}

// Keep retains the given batch rows, in that order, and frees the others; the
// decode loop calls it to stop computing rows that have finished.
func (c *Cache) Keep(rows []int64) {
	idx := fromHost(rows, []int64{int64(len(rows))}, gotch.Int64, c.layers[0].k.MustDevice())
	defer idx.MustDrop()
	for i := range c.layers {
		l := &c.layers[i]
		k, v := indexSelect(l.k, 0, idx), indexSelect(l.v, 0, idx)
		drop(l.k, l.v)
		l.k, l.v = k, v
	}
}

// Drop frees the cache's tensors.
func (c *Cache) Drop() {
	for i := range c.layers {
		drop(c.layers[i].k, c.layers[i].v)
		c.layers[i].k, c.layers[i].v = nil, nil
	}
}
