// Package task is the embedded synthetic multi-objective QA task of DESIGN.md §8: a
// seeded world of fictional people, cities, companies and countries with attributes and
// relations (so some questions need two hops), a Search-R1 corpus of short documents
// with near-duplicate distractors, K-objective question sets, and a scripted, deliberately
// imperfect oracle agent whose trajectories warm-start the policy by SFT. Everything is
// deterministic from the seed.
package task

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"

	"github.com/mempo/mempo/agent/protocol"
)

// ErrConfig is the class of an unusable task configuration.
var ErrConfig = errors.New("invalid task config")

// Kind is an entity type.
type Kind string

const (
	Person  Kind = "person"
	City    Kind = "city"
	Company Kind = "company"
	Country Kind = "country"
)

// attribute is one fact type: how it reads in a document, a question, a query and a
// memory. One phrase serves the document, the query and the memory: the document
// states "{x} works as a {v}.", the oracle searches "{x} works as a" and remembers
// "{x} works as a {v}", so that reading a fact is copying the words that follow the
// query in the retrieved text — a pattern a small model learns early.
type attribute struct {
	kind     Kind
	name     string
	target   Kind   // kind of the entity the value names; "" for a literal value
	lo, hi   int    // year range of a year literal
	phrase   string // {x} subject, {v} value; the value comes last
	question string // {x} is the subject phrase
	relation string // subject phrase through this relation, for two-hop questions
	label    string // what the oracle's <think> says it still needs
}

// attributes in document order per kind. Within a kind no phrase is a prefix of
// another, so a query names one fact.
var attributes = []attribute{
	{kind: Person, name: "occupation", phrase: "{x} works as a {v}", question: "What is the occupation of {x}?", label: "occupation"},
	{kind: Person, name: "birth_year", lo: 1900, hi: 2000, phrase: "{x} was born in the year {v}", question: "In what year was {x} born?", label: "birth year"},
	{kind: Person, name: "birth_city", target: City, phrase: "{x} was born in the city of {v}", question: "In which city was {x} born?", relation: "the birth city of {x}", label: "birth city"},
	{kind: Person, name: "employer", target: Company, phrase: "{x} is employed by {v}", question: "Which company does {x} work for?", relation: "the employer of {x}", label: "employer"},
	{kind: City, name: "country", target: Country, phrase: "{x} is a city in {v}", question: "In which country is {x}?", relation: "the country of {x}", label: "country"},
	{kind: City, name: "founded", lo: 1200, hi: 1950, phrase: "{x} was founded in the year {v}", question: "In what year was {x} founded?", label: "founding year"},
	{kind: City, name: "mayor", target: Person, phrase: "The mayor of {x} is {v}", question: "Who is the mayor of {x}?", relation: "the mayor of {x}", label: "mayor"},
	{kind: Company, name: "founded", lo: 1850, hi: 2015, phrase: "{x} was founded in the year {v}", question: "In what year was {x} founded?", label: "founding year"},
	{kind: Company, name: "founder", target: Person, phrase: "{x} was founded by {v}", question: "Who founded {x}?", relation: "the founder of {x}", label: "founder"},
	{kind: Company, name: "base", target: City, phrase: "{x} is based in {v}", question: "In which city is {x} based?", relation: "the home city of {x}", label: "home city"},
	{kind: Country, name: "capital", target: City, phrase: "The capital of {x} is {v}", question: "What is the capital of {x}?", relation: "the capital of {x}", label: "capital"},
	{kind: Country, name: "independence", lo: 1800, hi: 1990, phrase: "{x} became independent in the year {v}", question: "In what year did {x} become independent?", label: "independence year"},
}

// isYear reports whether the value is a year literal.
func (a attribute) isYear() bool { return a.hi > 0 }

// statement is the fact as the document states it and the memory keeps it.
func (a attribute) statement(x, v string) string { return fill(a.phrase, x, v) }

// query is the phrase up to the value: what the oracle searches for the fact.
func (a attribute) query(x string) string {
	return strings.TrimSpace(fill(strings.TrimSuffix(a.phrase, "{v}"), x, ""))
}

func attrsOf(kind Kind) []int {
	var out []int
	for i, a := range attributes {
		if a.kind == kind {
			out = append(out, i)
		}
	}
	return out
}

// attrIndex finds the attribute of a kind by its memory label.
func attrIndex(kind Kind, label string) (int, bool) {
	for i, a := range attributes {
		if a.kind == kind && a.label == label {
			return i, true
		}
	}
	return 0, false
}

func fill(tmpl, x, v string) string {
	return strings.NewReplacer("{x}", x, "{v}", v).Replace(tmpl)
}

// Fact is one attribute value of an entity. Ref is the index of the entity the value
// names, or -1 for a literal.
type Fact struct {
	Attr  int
	Value string
	Ref   int
}

// Entity is one fictional thing with its facts and its document.
type Entity struct {
	Kind  Kind
	Name  string
	Facts []Fact // in attribute order
	// Twin is, for a distractor, the entity it near-duplicates (similar name, other
	// values); -1 otherwise. Distractors only ever appear as documents.
	Twin  int
	DocID string
	parts []string
}

// fact returns the entity's fact for attribute index a.
func (e *Entity) fact(a int) (Fact, bool) {
	for _, f := range e.Facts {
		if f.Attr == a {
			return f, true
		}
	}
	return Fact{}, false
}

// Doc is the entity's document in Search-R1's corpus layout.
func (e *Entity) Doc() protocol.Doc {
	var b strings.Builder
	for i, f := range e.Facts {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(attributes[f.Attr].statement(e.Name, f.Value) + ".")
	}
	return protocol.Doc{ID: e.DocID, Contents: fmt.Sprintf("%q\n%s", e.Name, b.String())}
}

// World is the generated task: entities, corpus and question sets.
type World struct {
	Config   Config
	Entities []Entity
	Train    []Prompt
	Test     []Prompt
	byName   map[string]int
	twinOf   map[int][]int // entity -> its distractors
}

// Docs is the corpus, one document per entity, in entity order.
func (w *World) Docs() []protocol.Doc {
	docs := make([]protocol.Doc, len(w.Entities))
	for i := range w.Entities {
		docs[i] = w.Entities[i].Doc()
	}
	return docs
}

// Lookup returns the index of the entity with that exact name.
func (w *World) Lookup(name string) (int, bool) {
	i, ok := w.byName[name]
	return i, ok
}

// Generate builds the world, corpus and questions for cfg; the same cfg gives the same
// world byte for byte.
func Generate(cfg Config) (*World, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	r := rand.New(rand.NewPCG(cfg.Seed, 0x6d656d706f)) // stream label: "mempo"
	w := &World{Config: cfg, byName: map[string]int{}, twinOf: map[int][]int{}}
	var reg registry
	byKind := map[Kind][]int{}
	for _, c := range []struct {
		kind Kind
		n    int
	}{{Country, cfg.Countries}, {City, cfg.Cities}, {Company, cfg.Companies}, {Person, cfg.People}} {
		for range c.n {
			name, p := reg.fresh(r, c.kind, nil)
			if name == "" {
				return nil, fmt.Errorf("ran out of distinct %s names after %d; lower the entity counts: %w", c.kind, len(byKind[c.kind]), ErrConfig)
			}
			byKind[c.kind] = append(byKind[c.kind], len(w.Entities))
			w.Entities = append(w.Entities, Entity{Kind: c.kind, Name: name, Twin: -1, parts: p})
		}
	}
	pick := func(k Kind) int { return byKind[k][r.IntN(len(byKind[k]))] }

	// Cities first spread over countries so every country has one to be its capital.
	countryOf := map[int]int{}
	citiesIn := map[int][]int{}
	for i, c := range byKind[City] {
		country := byKind[Country][i%len(byKind[Country])]
		if i >= len(byKind[Country]) {
			country = pick(Country)
		}
		countryOf[c], citiesIn[country] = country, append(citiesIn[country], c)
	}
	for i := range w.Entities {
		e := &w.Entities[i]
		for _, a := range attrsOf(e.Kind) {
			at := attributes[a]
			ref := -1
			switch {
			case at.kind == City && at.name == "country":
				ref = countryOf[i]
			case at.kind == Country && at.name == "capital":
				in := citiesIn[i]
				ref = in[r.IntN(len(in))]
			case at.target != "":
				ref = pick(at.target)
			}
			e.Facts = append(e.Facts, w.value(r, a, ref))
		}
	}

	// Distractors: near-duplicate names with other values, the hard negatives of retrieval.
	n := len(w.Entities)
	for i := range n {
		if r.Float64() >= cfg.TwinRate {
			continue
		}
		orig := &w.Entities[i]
		name, p := reg.fresh(r, orig.Kind, orig.parts)
		if name == "" {
			continue // no free near-duplicate name; this entity has no distractor
		}
		twin := Entity{Kind: orig.Kind, Name: name, Twin: i, parts: p}
		for _, f := range orig.Facts {
			twin.Facts = append(twin.Facts, w.otherValue(r, f, byKind))
		}
		w.twinOf[i] = append(w.twinOf[i], len(w.Entities))
		w.Entities = append(w.Entities, twin)
	}
	for i := range w.Entities {
		w.Entities[i].DocID = fmt.Sprint(i)
		w.byName[w.Entities[i].Name] = i
	}
	var err error
	if w.Train, err = w.questions(r, "train", cfg.TrainK, cfg.TrainKMax, cfg.Train, nil); err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for _, p := range w.Train {
		seen[p.Question] = true
	}
	for _, k := range cfg.TestK {
		ps, err := w.questions(r, "test", k, 0, cfg.Test, seen)
		if err != nil {
			return nil, err
		}
		w.Test = append(w.Test, ps...)
	}
	return w, nil
}

// value draws attribute a's value; ref is the named entity for relations.
func (w *World) value(r *rand.Rand, a, ref int) Fact {
	at := attributes[a]
	switch {
	case ref >= 0:
		return Fact{Attr: a, Value: w.Entities[ref].Name, Ref: ref}
	case at.name == "occupation":
		return Fact{Attr: a, Value: occupations[r.IntN(len(occupations))], Ref: -1}
	default:
		return Fact{Attr: a, Value: fmt.Sprint(at.lo + r.IntN(at.hi-at.lo+1)), Ref: -1}
	}
}

// otherValue draws a value of the same attribute that differs from f's.
func (w *World) otherValue(r *rand.Rand, f Fact, byKind map[Kind][]int) Fact {
	at := attributes[f.Attr]
	for range 50 {
		ref := -1
		if at.target != "" {
			pool := byKind[at.target]
			ref = pool[r.IntN(len(pool))]
		}
		if g := w.value(r, f.Attr, ref); g.Value != f.Value {
			return g
		}
	}
	return f // a one-element domain; the distractor agrees on this fact
}
