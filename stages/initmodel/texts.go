package initmodel

import (
	"errors"
	"fmt"
	"io"
	"iter"

	"github.com/mempo/mempo/agent/protocol"
	"github.com/mempo/mempo/agent/search"
	"github.com/mempo/mempo/format"
)

// obsDocs is how many documents one rendered observation holds: the environment's
// top-k (DESIGN.md §6).
const obsDocs = 3

// trainingTexts streams the texts the tokenizer learns from, in a fixed order:
//
//   - every corpus document, rendered the way the policy will see it, as observations
//     of obsDocs consecutive documents ("<information>Doc 1(Title: …) …</information>"),
//     so the document glue merges like the entity names do;
//   - every question of the prompts datasets, which open every context the policy sees;
//   - the protocol's own texts (chat template with the system and user messages, the
//     corrective and last-turn messages, an empty observation and turn skeleton), once
//     per observation. Under the mempo context every call holds the prompt once next to
//     one observation, so weighting them one to one spends merges where the contexts
//     spend tokens: the prompt is the largest fixed part of every context.
//
// A read error stops the stream; it is stored in *errp, which the caller checks after
// training, since an iter.Seq cannot return one.
func trainingTexts(p *protocol.Protocol, corpora, prompts []string, errp *error) iter.Seq[string] {
	glue := []string{
		p.Prompt("", 1),
		p.Invalid,
		p.LastTurn,
		p.Observation(nil),
		p.Render("", "", protocol.Search, ""),
		p.Render("", "", protocol.Answer, ""),
	}
	return func(yield func(string) bool) {
		groups := 0
		emit := func(docs []protocol.Doc) bool {
			groups++
			return yield(p.Observation(docs))
		}
		for _, path := range corpora {
			ok, err := eachGroup(path, emit)
			if err != nil {
				*errp = err
				return
			}
			if !ok {
				return
			}
		}
		for _, dir := range prompts {
			ok, err := eachQuestion(dir, yield)
			if err != nil {
				*errp = err
				return
			}
			if !ok {
				return
			}
		}
		for range max(groups, 1) {
			for _, g := range glue {
				if !yield(g) {
					return
				}
			}
		}
	}
}

// eachGroup calls fn with consecutive groups of obsDocs documents of the corpus at
// path (the last group may be shorter). It reports false when fn asked to stop.
func eachGroup(path string, fn func([]protocol.Doc) bool) (bool, error) {
	c, err := search.OpenCorpus(path)
	if err != nil {
		return false, err
	}
	defer c.Close()
	var group []protocol.Doc
	n := 0
	for {
		d, err := c.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return false, err
		}
		n++
		group = append(group, protocol.Doc{ID: d.ID, Contents: d.Contents})
		if len(group) == obsDocs {
			if !fn(group) {
				return false, nil
			}
			group = group[:0]
		}
	}
	if n == 0 {
		return false, fmt.Errorf("corpus %s: no documents; pass a Search-R1 JSONL corpus ({\"id\", \"contents\"} per line): %w", path, ErrInput)
	}
	if len(group) > 0 && !fn(group) {
		return false, nil
	}
	return true, nil
}

// eachQuestion calls fn with the question of every row of the prompts dataset dir. It
// reports false when fn asked to stop.
func eachQuestion(dir string, fn func(string) bool) (bool, error) {
	d, err := format.OpenDataset(dir)
	if err != nil {
		return false, err
	}
	r, err := format.OpenShards[format.Prompt](d)
	if err != nil {
		return false, err
	}
	defer r.Close()
	for r.Next() {
		if !fn(r.Row().Question) {
			return false, nil
		}
	}
	return true, r.Err()
}
