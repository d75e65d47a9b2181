package rollout

import (
	"context"
	"fmt"
	"io"

	"github.com/mempo/mempo/format"
	"github.com/mempo/mempo/stages/protocol"
	"github.com/mempo/mempo/stages/search"
)

// documents adapts a search.Retriever to the protocol: one batched call per turn for
// every pending search of the shard, topk documents each, in Search-R1's corpus layout.
type documents struct {
	r    search.Retriever
	topk int
}

func (d documents) Retrieve(ctx context.Context, queries []string) ([][]protocol.Doc, error) {
	hits, err := d.r.Retrieve(ctx, queries, d.topk)
	if err != nil {
		return nil, err
	}
	out := make([][]protocol.Doc, len(hits))
	for i, hs := range hits {
		out[i] = make([]protocol.Doc, len(hs))
		for j, h := range hs {
			c := h.Contents
			if c == "" {
				c = search.JoinContents(h.Title, h.Text)
			}
			out[i][j] = protocol.Doc{ID: h.ID, Contents: c}
		}
	}
	return out, nil
}

// openRetriever opens the retriever the config names and the input that keys it: a
// server by its URL, a local index by the key its meta file records (a digest of the
// corpus bytes, analyzer and format), which is cheap where hashing a large index's
// files is not.
func openRetriever(cfg Config, in Inputs) (search.Retriever, io.Closer, format.Input, error) {
	switch {
	case cfg.RetrieverURL != "" && in.Index != "":
		return nil, nil, format.Input{}, fmt.Errorf("--index %s and --retriever-url %s: give one retriever: %w", in.Index, cfg.RetrieverURL, ErrConfig)
	case cfg.RetrieverURL != "":
		cc := in.Client
		cc.URL = cfg.RetrieverURL
		c, err := search.NewClient(cc)
		if err != nil {
			return nil, nil, format.Input{}, fmt.Errorf("--retriever-url: %w", err)
		}
		return c, c, format.Input{Name: "retriever", Path: c.URL(), Digest: "url:" + c.URL()}, nil
	case in.Index != "":
		l, err := search.OpenLocal(in.Index, search.LocalConfig{})
		if err != nil {
			return nil, nil, format.Input{}, fmt.Errorf("--index: %w", err)
		}
		return l, l, format.Input{Name: "index", Path: in.Index, Digest: "index:" + l.Meta().Key}, nil
	}
	return nil, nil, format.Input{}, fmt.Errorf("no retriever: pass --index DIR (a `mempo index` output) or --retriever-url URL: %w", ErrConfig)
}
