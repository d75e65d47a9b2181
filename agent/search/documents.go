package search

import (
	"context"

	"github.com/mempo/mempo/agent/protocol"
)

// Documents adapts a Retriever to the agent protocol: TopK documents per query, in
// Search-R1's corpus layout, one batched call for all of a turn's pending searches.
// The rollout stage and SFT's oracle retrieve through it, so both see the same
// observations.
type Documents struct {
	R    Retriever
	TopK int
}

// Retrieve implements protocol.Retriever.
func (d Documents) Retrieve(ctx context.Context, queries []string) ([][]protocol.Doc, error) {
	hits, err := d.R.Retrieve(ctx, queries, d.TopK)
	if err != nil {
		return nil, err
	}
	out := make([][]protocol.Doc, len(hits))
	for i, hs := range hits {
		out[i] = make([]protocol.Doc, len(hs))
		for j, h := range hs {
			c := h.Contents
			if c == "" {
				c = JoinContents(h.Title, h.Text)
			}
			out[i][j] = protocol.Doc{ID: h.ID, Contents: c}
		}
	}
	return out, nil
}
