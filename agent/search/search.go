// Package search is the agent's search tool (DESIGN.md §6): a reader for Search-R1
// JSONL corpora, a local BM25 index built with bleve (committed by stages/index), a
// Retriever over that index or over a Search-R1 retrieval server, an HTTP handler that
// serves a local index under the same API. The observation text the policy sees is
// rendered by agent/protocol.
//
// It is pure Go.
package search

import (
	"context"
	"errors"
	"strings"
)

// Hit is one retrieved passage.
type Hit struct {
	ID    string `json:"id"`
	Title string `json:"title"` // first line of Contents without its surrounding quotes
	Text  string `json:"text"`  // Contents after the first line
	// Contents is the passage exactly as stored in the corpus ("\"Title\"\ntext"). The
	// server answers with it and the agent's observation (protocol.Observation) is
	// rendered from it, so observations match Search-R1 byte for byte.
	Contents string  `json:"contents"`
	Score    float64 `json:"score"`
}

// Retriever answers a batch of queries with up to topk hits each, best first.
//
// The result has one slice per query, in query order. Implementations are safe for
// concurrent use and deterministic: the same index and queries give the same hits in
// the same order (ties broken by ascending document id). An error means no result
// for the whole batch; a query that matches nothing gets an empty slice, not an error.
type Retriever interface {
	Retrieve(ctx context.Context, queries []string, topk int) ([][]Hit, error)
}

// Error classes, matched with errors.Is.
var (
	// ErrCorpus marks a malformed corpus file.
	ErrCorpus = errors.New("bad corpus")
	// ErrNotIndex marks a directory that holds no complete index.
	ErrNotIndex = errors.New("not an index")
	// ErrUnreachable marks a retrieval server that did not answer within the retry budget.
	ErrUnreachable = errors.New("unreachable")
	// ErrProtocol marks a retrieval server answer that does not follow the API.
	ErrProtocol = errors.New("retrieval protocol error")
	// ErrBadRequest marks a request the retriever refuses (bad topk, too many queries).
	ErrBadRequest = errors.New("bad retrieval request")
	// ErrConfig marks an unusable retrieval server config; messages name the flag.
	ErrConfig = errors.New("invalid retrieval server config")
)

// contents returns the stored passage, or rebuilds the corpus form from Title and
// Text for hits made by hand (tests, fakes) that left Contents empty.
func (h Hit) contents() string {
	if h.Contents != "" {
		return h.Contents
	}
	return JoinContents(h.Title, h.Text)
}

// JoinContents builds a Search-R1 "contents" value from a title and a text, the
// layout of the wiki-18 corpus: the title in double quotes on the first line.
func JoinContents(title, text string) string {
	return `"` + title + `"` + "\n" + text
}

// SplitContents splits a Search-R1 "contents" value into its title (the first line,
// surrounding double quotes removed, as Search-R1's BM25 retriever does) and its text
// (everything after the first newline).
func SplitContents(contents string) (title, text string) {
	first, rest := splitLine(contents)
	return strings.Trim(first, `"`), rest
}

// splitLine mirrors Python's content.split("\n")[0] and "\n".join(content.split("\n")[1:]).
func splitLine(s string) (first, rest string) {
	first, rest, _ = strings.Cut(s, "\n")
	return first, rest
}
