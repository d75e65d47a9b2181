package rollout

import (
	"fmt"
	"io"

	"github.com/mempo/mempo/agent/search"
	"github.com/mempo/mempo/format"
	"github.com/mempo/mempo/jobs"
)

// openRetriever opens the retriever the config names and the input that keys it: a
// server by its URL, a local index as every checkpoint input is keyed
// (jobs.CheckpointInput): by the digest of its commit record, which lists every
// file's sha256, so keying it reads one small file, not the index.
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
		input, err := jobs.CheckpointInput("index", in.Index)
		if err != nil {
			l.Close()
			return nil, nil, format.Input{}, fmt.Errorf("--index: %w", err)
		}
		return l, l, input, nil
	}
	return nil, nil, format.Input{}, fmt.Errorf("no retriever: pass --index DIR (a `mempo index` output) or --retriever-url URL: %w", ErrConfig)
}
