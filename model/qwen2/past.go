package qwen2

import (
	"fmt"

	"github.com/mempo/mempo/model/torch"
	"github.com/sugarme/gotch"
)

// Past is what a finished completion leaves for the next turn of the same sequence:
// the keys and values of its prompt and of every generated token but the last (which
// was sampled, never fed), on the model that generated it. A request whose prompt
// begins with those tokens, as a multi-turn agent's next context does when it keeps
// everything (the full-context policy), runs only the tokens past them, so an episode
// costs its new tokens each turn instead of its whole context again (what
// past_key_values carries in transformers). A Past lives in host memory whatever the
// model's device, so the sequences an agent carries between turns hold no device
// memory: the device holds a turn's batch, as without them. The caller owns a Past
// and drops it.
type Past struct {
	ids   []int64
	cache *Cache // one row, Len() == len(ids)
}

// Len is the number of tokens whose keys and values the Past holds.
func (p *Past) Len() int { return len(p.ids) }

// Tokens are the tokens whose keys and values the Past holds, in order; the caller
// does not modify them.
func (p *Past) Tokens() []int64 { return p.ids }

// Drop frees the keys and values; a second Drop, or one on nil, does nothing.
func (p *Past) Drop() {
	if p != nil && p.cache != nil {
		p.cache.Drop()
		p.cache = nil
	}
}

// reuse is how many of prompt's first tokens p's slots serve: their common prefix,
// less one when that is the whole prompt, since the last prompt token must run to
// give the first logits.
func (p *Past) reuse(prompt []int64) int {
	if p == nil || p.cache == nil {
		return 0
	}
	n := 0
	for n < len(p.ids) && n < len(prompt) && p.ids[n] == prompt[n] {
		n++
	}
	return min(n, len(prompt)-1)
}

// hasPast reports whether any request reuses a Past.
func hasPast(reqs []Request) bool {
	for _, r := range reqs {
		if r.Past.reuse(r.Prompt) > 0 {
			return true
		}
	}
	return false
}

// prefillPasts starts the decode of reqs when some carry a Past: row i's first slots
// are the reusable slots of its Past, copied in, and its first batch row is the rest
// of its prompt, from that position. Rows without one start empty and run their
// whole prompt (no trunk sharing: an agent's turns start together, so a batch mixes
// the two only when some episodes outlive others' first turn).
func (m *Model) prefillPasts(reqs []Request, maxNew int) (cache *Cache, tokens [][]int64, start []int, valid [][]bool) {
	tokens, start = make([][]int64, len(reqs)), make([]int, len(reqs))
	width, rest := 0, 0
	for i, r := range reqs {
		start[i] = r.Past.reuse(r.Prompt)
		tokens[i] = r.Prompt[start[i]:]
		width, rest = max(width, start[i]), max(rest, len(tokens[i]))
	}
	cache = m.NewCache(len(reqs), width+rest+maxNew)
	valid = make([][]bool, len(reqs))
	for i, r := range reqs {
		valid[i] = make([]bool, width)
		for s := range start[i] {
			valid[i][s] = true
		}
		if start[i] > 0 {
			cache.copyPast(i, r.Past, start[i])
		}
	}
	cache.len = int64(width)
	return cache, tokens, start, valid
}

// copyPast writes the first n slots of p into row of c, from slot 0 (the caller sets
// c's length).
func (c *Cache) copyPast(row int, p *Past, n int) {
	for l := range c.layers {
		dst, src := &c.layers[l], &p.cache.layers[l]
		for _, t := range [2][2]torch.Raw{{dst.k, src.k}, {dst.v, src.v}} {
			r := t[0].Narrow(0, int64(row), 1)
			into := r.Narrow(2, 0, int64(n))
			from := t[1].Narrow(2, 0, int64(n))
			into.CopyFrom(from)
			torch.Free(r, into, from)
		}
	}
}

// keepPast copies row of cache, whose tokens sit in the slots valid marks, into a
// Past of the tokens ids that those slots hold.
func (m *Model) keepPast(cache *Cache, row int, valid []bool, ids []int64) *Past {
	var slots []int
	for s, ok := range valid[:cache.Len()] {
		if ok {
			slots = append(slots, s)
		}
	}
	if len(slots) != len(ids) {
		panic(fmt.Sprintf("kv cache: row %d holds %d slots for %d tokens", row, len(slots), len(ids)))
	}
	c := m.packRows([]rowSlots{{from: cache, row: row, slots: slots}}, len(slots))
	if m.device.IsCuda() {
		for i := range c.layers {
			l := &c.layers[i]
			k, v := l.k.ToDevice(gotch.CPU), l.v.ToDevice(gotch.CPU)
			torch.Free(l.k, l.v)
			l.k, l.v = k, v
		}
		c.device = gotch.CPU
	}
	return &Past{ids: ids, cache: c}
}
