package search

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// The Search-R1 retrieval server API (search_r1/search/retrieval_server.py):
//
//	POST /retrieve {"queries": ["…", …], "topk": 3, "return_scores": true}
//	-> {"result": [[{"document": {"id": "…", "contents": "\"Title\"\ntext"}, "score": 12.3}, …], …]}
//
// With "return_scores": false (the server's default) each inner element is the bare
// document object. A missing or zero "topk" means the server's default.

// apiRequest is the body of POST /retrieve.
type apiRequest struct {
	Queries      []string `json:"queries"`
	TopK         *int     `json:"topk,omitempty"`
	ReturnScores bool     `json:"return_scores"`
}

// apiDoc is a document as the API carries it.
type apiDoc struct {
	ID       string `json:"id"`
	Contents string `json:"contents"`
}

// apiScored is one element of a result list when return_scores is true.
type apiScored struct {
	Document apiDoc  `json:"document"`
	Score    float64 `json:"score"`
}

// decodeResult parses a /retrieve answer into hits, accepting both element shapes
// and documents that carry "title"/"text" instead of "contents" (Search-R1's BM25
// server adds those fields). want is the number of queries sent.
func decodeResult(body []byte, want int) ([][]Hit, error) {
	var resp struct {
		Result *[][]json.RawMessage `json:"result"`
	}
	if err := json.Unmarshal(body, &resp); err != nil {
		return nil, fmt.Errorf("answer is not JSON (%w): %q", err, snippet(body))
	}
	if resp.Result == nil {
		return nil, fmt.Errorf(`answer has no "result": %q`, snippet(body))
	}
	if got := len(*resp.Result); got != want {
		return nil, fmt.Errorf("answer has %d result lists for %d queries", got, want)
	}
	out := make([][]Hit, want)
	for i, list := range *resp.Result {
		out[i] = make([]Hit, 0, len(list))
		for j, raw := range list {
			h, err := decodeHit(raw)
			if err != nil {
				return nil, fmt.Errorf("result %d, document %d: %w", i, j, err)
			}
			out[i] = append(out[i], h)
		}
	}
	return out, nil
}

func decodeHit(raw json.RawMessage) (Hit, error) {
	var el struct {
		Document json.RawMessage `json:"document"`
		Score    *float64        `json:"score"`
	}
	if err := json.Unmarshal(raw, &el); err != nil {
		return Hit{}, fmt.Errorf("want an object, got %q", snippet(raw))
	}
	docRaw := raw
	if len(el.Document) > 0 && !bytes.Equal(el.Document, []byte("null")) {
		docRaw = el.Document
	}
	var doc struct {
		ID       json.RawMessage `json:"id"`
		Contents *string         `json:"contents"`
		Title    *string         `json:"title"`
		Text     *string         `json:"text"`
	}
	if err := json.Unmarshal(docRaw, &doc); err != nil {
		return Hit{}, fmt.Errorf("document: want an object, got %q", snippet(docRaw))
	}
	var h Hit
	if len(doc.ID) > 0 && !bytes.Equal(doc.ID, []byte("null")) {
		id, err := parseID(doc.ID)
		if err != nil {
			return Hit{}, err
		}
		h.ID = id
	}
	switch {
	case doc.Contents != nil:
		h.Contents = *doc.Contents
	case doc.Title != nil:
		text := ""
		if doc.Text != nil {
			text = *doc.Text
		}
		h.Contents = JoinContents(*doc.Title, text)
	default:
		return Hit{}, errors.New(`document has no "contents"`)
	}
	h.Title, h.Text = SplitContents(h.Contents)
	if el.Score != nil {
		h.Score = *el.Score
	}
	return h, nil
}

// snippet shortens a body for an error message.
func snippet(b []byte) string {
	const n = 200
	if len(b) > n {
		return string(b[:n]) + "…"
	}
	return string(b)
}
