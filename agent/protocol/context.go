package protocol

import (
	"errors"
	"fmt"
)

// ErrContextPolicy is the class of an unknown --context value.
var ErrContextPolicy = errors.New("unknown context policy")

// ContextPolicy decides which earlier tokens the policy model sees at turn t (DESIGN.md §6).
type ContextPolicy string

const (
	// Mempo keeps the prompt, the previous turn's memory block and action, and the latest
	// observation; everything older is dropped.
	Mempo ContextPolicy = "mempo"
	// Mem1 keeps the prompt, the whole previous response and the latest observation.
	Mem1 ContextPolicy = "mem1"
	// Full keeps everything (ReAct-style baseline).
	Full ContextPolicy = "full"
)

// ParseContextPolicy checks a --context value.
func ParseContextPolicy(s string) (ContextPolicy, error) {
	switch p := ContextPolicy(s); p {
	case Mempo, Mem1, Full:
		return p, nil
	}
	return "", fmt.Errorf("--context %q: want mempo, mem1 or full: %w", s, ErrContextPolicy)
}

// Source says where a segment's tokens come from.
type Source string

const (
	FromPrompt      Source = "prompt"      // the chat prompt, encoded once per episode
	FromResponse    Source = "response"    // a whole earlier response, as generated
	FromMemory      Source = "memory"      // the memory span of an earlier response
	FromAction      Source = "action"      // the action span of an earlier response
	FromObservation Source = "observation" // an observation, encoded once when produced
)

// Segment is a run of context tokens with their origin. Turn is the turn that produced
// them (-1 for the prompt). IDs alias the episode's records; do not modify them.
type Segment struct {
	Source Source
	Turn   int
	IDs    []int32
}

// Context is a context as segments, in order.
type Context []Segment

// IDs concatenates the segments: exactly the ids the policy is given.
func (c Context) IDs() []int32 {
	n := 0
	for _, s := range c {
		n += len(s.IDs)
	}
	ids := make([]int32, 0, n)
	for _, s := range c {
		ids = append(ids, s.IDs...)
	}
	return ids
}

// Len is the number of tokens.
func (c Context) Len() int {
	n := 0
	for _, s := range c {
		n += len(s.IDs)
	}
	return n
}

// build returns the context for turn t from the prompt and the records of turns < t.
// Observation ids are nil only for the final turn of a finished episode, which no later
// context includes.
func build(policy ContextPolicy, prompt []int32, recs []Record, t int) Context {
	ctx := Context{{Source: FromPrompt, Turn: -1, IDs: prompt}}
	if t == 0 {
		return ctx
	}
	switch policy {
	case Full:
		return append(ctx, history(recs[:t])...)
	case Mem1:
		prev := recs[t-1]
		return append(ctx,
			Segment{FromResponse, prev.Turn, prev.Response},
			Segment{FromObservation, prev.Turn, prev.ObservationIDs})
	default:
		prev := recs[t-1]
		ctx = append(ctx, kept(prev)...)
		return append(ctx, Segment{FromObservation, prev.Turn, prev.ObservationIDs})
	}
}

// history is every response and observation of recs, in order.
func history(recs []Record) Context {
	var c Context
	for _, r := range recs {
		c = append(c, Segment{FromResponse, r.Turn, r.Response})
		if r.ObservationIDs != nil {
			c = append(c, Segment{FromObservation, r.Turn, r.ObservationIDs})
		}
	}
	return c
}

// kept is what mempo carries from a response: its memory span, then its action span,
// both as the exact generated ids. A token in both spans (one token straddling
// "</mem><search>") is kept once. An invalid turn has no action span, so only a
// well-formed memory survives it.
func kept(r Record) Context {
	var c Context
	mem, act := r.Parsed.MemTokens, r.Parsed.ActTokens
	if !mem.Empty() {
		c = append(c, Segment{FromMemory, r.Turn, r.Response[mem.Start:mem.End]})
	}
	if !act.Empty() {
		start := act.Start
		if !mem.Empty() && start < mem.End {
			start = mem.End
		}
		if start < act.End {
			c = append(c, Segment{FromAction, r.Turn, r.Response[start:act.End]})
		}
	}
	return c
}
