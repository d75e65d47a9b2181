package bpe

import (
	"strings"
	"sync"
)

// rule is one merge: the pair (left, right) becomes id; lower rank merges first.
type rule struct {
	rank, id int32
}

func pairKey(left, right int32) uint64 { return uint64(uint32(left))<<32 | uint64(uint32(right)) }

// symbol is a node of the doubly linked list a word is merged in; id < 0 marks a symbol
// absorbed into its left neighbour.
type symbol struct {
	id, prev, next int32
}

// candidate is a possible merge of the symbol at pos with its right neighbour.
type candidate struct {
	rank, pos, left, right, id int32
}

// candidateBefore orders the merge heap by (rank, pos), HF's order: the best-ranked
// merge first and, among equal ranks, the leftmost.
func candidateBefore(a, b candidate) bool {
	return a.rank < b.rank || a.rank == b.rank && a.pos < b.pos
}

// mergeWord appends the ids of the byte-level BPE encoding of word (raw bytes, len >= 1).
// Each merge costs O(log n) for the heap, so long words stay O(n log n), not O(n²).
func (t *Tokenizer) mergeWord(dst []int32, word string) []int32 {
	n := len(word)
	syms := make([]symbol, n)
	for i := 0; i < n; i++ {
		syms[i] = symbol{id: t.byteID[word[i]], prev: int32(i - 1), next: int32(i + 1)}
	}
	syms[n-1].next = -1
	h := heap[candidate]{items: make([]candidate, 0, n), before: candidateBefore}
	try := func(pos int32) {
		l := syms[pos]
		if l.next < 0 {
			return
		}
		right := syms[l.next].id
		if r, ok := t.merges[pairKey(l.id, right)]; ok {
			h.push(candidate{rank: r.rank, pos: pos, left: l.id, right: right, id: r.id})
		}
	}
	for i := 0; i < n-1; i++ {
		try(int32(i))
	}
	for h.len() > 0 {
		c := h.pop()
		l := &syms[c.pos]
		// Skip candidates made stale by an earlier merge: the left symbol was absorbed or
		// grew, or its right neighbour changed.
		if l.id != c.left || l.next < 0 || syms[l.next].id != c.right {
			continue
		}
		r := syms[l.next]
		syms[l.next].id = -1
		l.id = c.id
		l.next = r.next
		if r.next >= 0 {
			syms[r.next].prev = c.pos
		}
		if l.prev >= 0 {
			try(l.prev)
		}
		try(c.pos)
	}
	for i := int32(0); i >= 0; i = syms[i].next {
		dst = append(dst, syms[i].id)
	}
	return dst
}

// cache maps pre-tokens to their ids. Text repeats its words, so most pre-tokens after
// the first few thousand are hits. Safe for concurrent use; when full it is emptied
// rather than growing without bound, which changes speed, never output.
type cache struct {
	mu sync.RWMutex
	m  map[string][]int32
}

const (
	cacheEntries = 1 << 16
	cacheWordLen = 256 // longer pre-tokens are rare and not worth the memory
)

func (c *cache) get(word string) ([]int32, bool) {
	c.mu.RLock()
	ids, ok := c.m[word]
	c.mu.RUnlock()
	return ids, ok
}

func (c *cache) put(word string, ids []int32) {
	if len(word) > cacheWordLen {
		return
	}
	word = strings.Clone(word) // do not keep the caller's whole input alive
	ids = append([]int32(nil), ids...)
	c.mu.Lock()
	if c.m == nil || len(c.m) >= cacheEntries {
		c.m = make(map[string][]int32, 1024)
	}
	c.m[word] = ids
	c.mu.Unlock()
}
