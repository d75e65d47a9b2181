package task

import (
	"context"
	"sort"
	"strings"

	"github.com/mempo/mempo/agent/protocol"
)

// Exact is a perfect in-memory retriever for tests and sanity checks: a query returns the
// documents of the entities whose names it contains (longest name first), then their
// near-duplicate distractors, up to K documents.
type Exact struct {
	w *World
	K int
}

// NewExact builds the exact-match retriever over a world.
func NewExact(w *World, k int) *Exact { return &Exact{w: w, K: k} }

// Retrieve implements protocol.Retriever.
func (x *Exact) Retrieve(_ context.Context, queries []string) ([][]protocol.Doc, error) {
	out := make([][]protocol.Doc, len(queries))
	for qi, q := range queries {
		var hits []int
		for i, e := range x.w.Entities {
			if e.Twin < 0 && strings.Contains(q, e.Name) {
				hits = append(hits, i)
			}
		}
		sort.SliceStable(hits, func(a, b int) bool { return len(x.w.Entities[hits[a]].Name) > len(x.w.Entities[hits[b]].Name) })
		for _, h := range hits {
			hits = append(hits, x.w.twinOf[h]...)
		}
		for _, h := range hits {
			if len(out[qi]) == x.K {
				break
			}
			out[qi] = append(out[qi], x.w.Entities[h].Doc())
		}
	}
	return out, nil
}
