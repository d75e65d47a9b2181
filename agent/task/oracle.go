package task

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"

	"github.com/mempo/mempo/agent/protocol"
)

// OracleConfig sets the scripted agent's budget and its imperfections (DESIGN.md §8).
type OracleConfig struct {
	// Drop is the probability p that a fact already in memory is left out of the next
	// <mem>, independently per fact and turn. A dropped fact must be searched again, or
	// is guessed when the turns run out.
	Drop float64 `json:"drop"`
	// Distractor is the probability of writing a near-duplicate distractor's value
	// instead of the fact when both documents are retrieved.
	Distractor float64 `json:"distractor"`
	// MaxTurns is the turn budget, as in the rollout; the last turn always answers.
	MaxTurns int `json:"max_turns"`
	// Seed drives the imperfections; each question gets its own stream.
	Seed uint64 `json:"seed"`
}

// Validate names the first bad field.
func (c OracleConfig) Validate() error {
	for _, f := range []struct {
		flag string
		v    float64
	}{{"--oracle-drop", c.Drop}, {"--oracle-distractor", c.Distractor}} {
		if !(f.v >= 0 && f.v <= 1) {
			return fmt.Errorf("%s %v: want a probability in [0,1]: %w", f.flag, f.v, ErrConfig)
		}
	}
	if c.MaxTurns < 1 {
		return fmt.Errorf("--max-turns %d: want at least 1: %w", c.MaxTurns, ErrConfig)
	}
	return nil
}

// Step is one oracle turn: the response text and, for a search, the retrieved documents
// and the observation the environment answers with. SFT replays a trajectory through
// protocol.Episode — Step with the encoded response, Observe with Docs — so its contexts
// are built by the same context policy as the rollouts.
type Step struct {
	Response    string         `json:"response"`
	Query       string         `json:"query,omitempty"`
	Docs        []protocol.Doc `json:"docs,omitempty"`
	Observation string         `json:"observation,omitempty"`
}

// Trajectory is one expert episode with its forgetting counters.
type Trajectory struct {
	UID    string `json:"uid"`
	Steps  []Step `json:"steps"`
	Answer string `json:"answer"`
	// Found counts the facts written into memory at some turn; Kept those of them in the
	// final memory.
	Found int `json:"found"`
	Kept  int `json:"kept"`
	// Chances counts (fact, turn) pairs where a remembered fact could be dropped; Drops
	// how many were. Drops/Chances estimates OracleConfig.Drop.
	Chances int `json:"chances"`
	Drops   int `json:"drops"`
}

// Oracle is the scripted expert: it searches each objective's facts in turn, keeps what
// it found in <mem>, and answers.
type Oracle struct {
	w   *World
	p   *protocol.Protocol
	ret protocol.Retriever
	cfg OracleConfig
}

// NewOracle checks cfg and binds the oracle to a world, a protocol and a retriever.
func NewOracle(w *World, p *protocol.Protocol, ret protocol.Retriever, cfg OracleConfig) (*Oracle, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Oracle{w: w, p: p, ret: ret, cfg: cfg}, nil
}

// note is one remembered fact: hop j of objective i, about attribute attr of subject.
type note struct {
	obj, hop       int
	attr           int
	subject, value string
}

func (n note) String() string { return attributes[n.attr].statement(n.subject, n.value) }

type key struct{ obj, hop int }

// Play runs one question to its answer.
func (o *Oracle) Play(ctx context.Context, q Prompt) (Trajectory, error) {
	sum := sha256.Sum256([]byte(q.UID))
	r := rand.New(rand.NewPCG(o.cfg.Seed, binary.LittleEndian.Uint64(sum[:8])))
	tr := Trajectory{UID: q.UID}
	var mem []note
	found := map[key]bool{}
	failures := map[key]int{}
	var pending *note // the search of the previous turn
	var docs []protocol.Doc

	for t := 0; t < o.cfg.MaxTurns; t++ {
		if t > 0 {
			kept := mem[:0]
			for _, n := range mem {
				tr.Chances++
				if r.Float64() < o.cfg.Drop {
					tr.Drops++
					continue
				}
				kept = append(kept, n)
			}
			mem = kept
		}
		if pending != nil {
			k := key{pending.obj, pending.hop}
			if v, ok := o.read(r, *pending, docs); ok {
				pending.value = v
				mem = append(mem, *pending)
				slices.SortFunc(mem, func(a, b note) int { return (a.obj-b.obj)*8 + a.hop - b.hop })
				found[k] = true
			} else {
				failures[k]++
			}
			pending = nil
		}
		next, gaveUp, err := o.plan(q, mem, failures)
		if err != nil {
			return Trajectory{}, err
		}
		memText := memoryText(mem)
		if next == nil || t == o.cfg.MaxTurns-1 {
			tr.Answer = o.answer(q, mem)
			thought := "I have found every part, so I answer."
			if gaveUp || next != nil {
				thought = "I could not find every part; I answer with what I have."
			}
			tr.Steps = append(tr.Steps, Step{Response: o.p.Render(memText, thought, protocol.Answer, tr.Answer)})
			break
		}
		query := attributes[next.attr].query(next.subject)
		thought := "I still need the " + attributes[next.attr].label + " of " + next.subject + "."
		if failures[key{next.obj, next.hop}] > 0 {
			query, thought = next.subject, "That search missed; I search the name alone."
		}
		res, err := o.ret.Retrieve(ctx, []string{query})
		if err != nil {
			return Trajectory{}, fmt.Errorf("question %s turn %d: retrieve %q: %w", q.UID, t, query, err)
		}
		if len(res) != 1 {
			return Trajectory{}, fmt.Errorf("question %s turn %d: retriever returned %d results for 1 query", q.UID, t, len(res))
		}
		docs = res[0]
		obs := o.p.Observation(docs)
		if t+1 == o.cfg.MaxTurns-1 {
			obs += o.p.LastTurn // as protocol.Episode does before the last turn
		}
		tr.Steps = append(tr.Steps, Step{Response: o.p.Render(memText, thought, protocol.Search, query), Query: query, Docs: docs, Observation: obs})
		pending = next
	}
	final := map[key]bool{}
	for _, n := range mem {
		final[key{n.obj, n.hop}] = true
	}
	for k := range found {
		tr.Found++
		if final[k] {
			tr.Kept++
		}
	}
	return tr, nil
}

// plan picks the next fact to search: the first hop of the first unfinished objective
// that is not in memory. An objective whose fact failed twice is given up.
func (o *Oracle) plan(q Prompt, mem []note, failures map[key]int) (next *note, gaveUp bool, err error) {
	have := map[key]string{}
	for _, n := range mem {
		have[key{n.obj, n.hop}] = n.value
	}
	for i, obj := range q.Objectives {
		if _, ok := have[key{i, len(obj.Hops) - 1}]; ok {
			continue
		}
		for j, h := range obj.Hops {
			if _, ok := have[key{i, j}]; ok {
				continue
			}
			if failures[key{i, j}] >= 2 {
				gaveUp = true
				break
			}
			subject := h.Subject
			if j > 0 {
				subject = have[key{i, j - 1}] // the remembered value, right or wrong
			}
			if next == nil {
				a, err := o.attrOf(h)
				if err != nil {
					return nil, false, fmt.Errorf("question %s: %w", q.UID, err)
				}
				next = &note{obj: i, hop: j, attr: a, subject: subject}
			}
			break
		}
	}
	return next, gaveUp, nil
}

// attrOf is the attribute a hop asks for; its true subject's kind disambiguates the
// label (a city and a company both have a founding year).
func (o *Oracle) attrOf(h Hop) (int, error) {
	if e, ok := o.w.Lookup(h.Subject); ok {
		if a, ok := attrIndex(o.w.Entities[e].Kind, h.Label); ok {
			return a, nil
		}
	}
	return 0, fmt.Errorf("hop %q of %q is not a fact of this world: %w", h.Label, h.Subject, ErrConfig)
}

// read takes the fact from the retrieved documents: the subject's own document, or —
// with probability Distractor when its near-duplicate was retrieved too — the
// near-duplicate's value.
func (o *Oracle) read(r *rand.Rand, n note, docs []protocol.Doc) (string, bool) {
	s, ok := o.w.Lookup(n.subject)
	if !ok {
		return "", false
	}
	a := n.attr
	var own, twin string
	for _, d := range docs {
		i, err := strconv.Atoi(d.ID)
		if err != nil || i < 0 || i >= len(o.w.Entities) {
			continue
		}
		e := &o.w.Entities[i]
		f, ok := e.fact(a)
		switch {
		case !ok:
		case i == s && own == "":
			own = f.Value
		case e.Twin == s && twin == "":
			twin = f.Value
		}
	}
	if own == "" {
		return "", false
	}
	if twin != "" && r.Float64() < o.cfg.Distractor {
		return twin, true
	}
	return own, true
}

func (o *Oracle) answer(q Prompt, mem []note) string {
	out := make([]string, len(q.Objectives))
	for i, obj := range q.Objectives {
		out[i] = "unknown"
		for _, n := range mem {
			if n.obj == i && n.hop == len(obj.Hops)-1 {
				out[i] = n.value
			}
		}
	}
	return o.p.JoinAnswers(out)
}

func memoryText(mem []note) string {
	if len(mem) == 0 {
		return "nothing found yet"
	}
	parts := make([]string, len(mem))
	for i, n := range mem {
		parts[i] = n.String()
	}
	return strings.Join(parts, "; ")
}
