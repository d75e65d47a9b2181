package task

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"strings"
)

// Config sizes the synthetic world; `mempo gen-task` fills it from flags.
type Config struct {
	// Seed makes the whole world, corpus and question sets reproducible.
	Seed uint64 `json:"seed"`
	// People, Cities, Companies and Countries count the entities of each kind, before
	// distractors.
	People    int `json:"people"`
	Cities    int `json:"cities"`
	Companies int `json:"companies"`
	Countries int `json:"countries"`
	// TwinRate is the probability that an entity gets a near-duplicate distractor
	// document (similar name, other values).
	TwinRate float64 `json:"twin_rate"`
	// TwoHopRate is the probability that an objective goes through a relation
	// ("the founder of X") and needs two searches.
	TwoHopRate float64 `json:"two_hop_rate"`
	// NoYearQuestions keeps year facts in the documents but out of the questions: with
	// Qwen's digit-by-digit pre-tokenizer a tiny model copies a name far more readily
	// than four digit tokens, each seen everywhere in its context.
	NoYearQuestions bool `json:"no_year_questions,omitempty"`
	// TrainK objectives per training question, Train questions. With TrainKMax above
	// TrainK each training question draws its count uniformly from TrainK..TrainKMax, so
	// RL trains where memory decides as well as where it barely matters; zero keeps
	// every question at TrainK (and the config's JSON, so earlier cache keys, unchanged).
	TrainK    int `json:"train_k"`
	TrainKMax int `json:"train_k_max,omitempty"`
	Train     int `json:"train"`
	// TestK lists the objective counts of the test sets, Test questions each.
	TestK []int `json:"test_k"`
	Test  int   `json:"test"`
}

// DefaultConfig is the demo world: about 270 entities and 80 distractors, small enough
// for a tiny model and a ~4k-token BPE.
func DefaultConfig() Config {
	return Config{
		Seed: 1, People: 160, Cities: 48, Companies: 48, Countries: 12,
		TwinRate: 0.3, TwoHopRate: 0.4,
		TrainK: 2, Train: 2000, TestK: []int{2, 4, 6}, Test: 200,
	}
}

// Validate names the first bad field.
func (c Config) Validate() error {
	for _, f := range []struct {
		flag string
		n    int
	}{{"--people", c.People}, {"--cities", c.Cities}, {"--companies", c.Companies}, {"--countries", c.Countries}} {
		if f.n < 1 || f.n > 5000 {
			return fmt.Errorf("%s %d: want 1..5000: %w", f.flag, f.n, ErrConfig)
		}
	}
	if c.Cities < c.Countries {
		return fmt.Errorf("--cities %d < --countries %d: every country needs a capital: %w", c.Cities, c.Countries, ErrConfig)
	}
	for _, f := range []struct {
		flag string
		v    float64
	}{{"--twin-rate", c.TwinRate}, {"--two-hop-rate", c.TwoHopRate}} {
		if !(f.v >= 0 && f.v <= 1) {
			return fmt.Errorf("%s %v: want a probability in [0,1]: %w", f.flag, f.v, ErrConfig)
		}
	}
	if c.Train < 0 || c.Test < 0 {
		return fmt.Errorf("--train %d, --test %d: want non-negative counts: %w", c.Train, c.Test, ErrConfig)
	}
	for _, k := range append([]int{c.TrainK}, c.TestK...) {
		if k < 1 || k > 32 {
			return fmt.Errorf("objective count %d: want 1..32 (--train-k, --test-k): %w", k, ErrConfig)
		}
	}
	if c.TrainKMax != 0 && (c.TrainKMax < c.TrainK || c.TrainKMax > 32) {
		return fmt.Errorf("--train-k-max %d: want 0 (every question --train-k) or %d..32: %w", c.TrainKMax, c.TrainK, ErrConfig)
	}
	return nil
}

// Hop is one search an objective needs: the fact Attr of Subject, found in document DocID.
type Hop struct {
	Subject string `json:"subject"`
	Label   string `json:"label"` // memory label, e.g. "founder"
	Value   string `json:"value"`
	DocID   string `json:"doc_id"`
}

// Objective is one of a question's K parts.
type Objective struct {
	Question string   `json:"question"`
	Aliases  []string `json:"aliases"` // accepted answers, the first is canonical
	Hops     []Hop    `json:"hops"`
}

// Prompt is one question as the prompts shard stores it (DESIGN.md §3), plus the
// objectives the oracle and the forgetting metric need.
type Prompt struct {
	UID        string      `json:"uid"`
	DataSource string      `json:"data_source"`
	Question   string      `json:"question"` // objective questions joined by "; "
	Golds      [][]string  `json:"golds"`
	Split      string      `json:"split"`
	K          int         `json:"k"`
	Objectives []Objective `json:"objectives"`
}

// DataSource names the synthetic task in prompts shards.
const DataSource = "synthetic"

// Facts are the values of every hop, in order: what a perfect memory holds at the end.
func (p Prompt) Facts() []Hop {
	var hops []Hop
	for _, o := range p.Objectives {
		hops = append(hops, o.Hops...)
	}
	return hops
}

// aliases are the accepted answers for a fact value.
func (w *World) aliases(f Fact) []string {
	if f.Ref < 0 {
		return []string{f.Value}
	}
	e := w.Entities[f.Ref]
	switch e.Kind {
	case Person:
		return []string{e.Name, capitalize(e.parts[2] + e.parts[3])} // the family name
	case Company:
		return []string{e.Name, capitalize(e.parts[0] + e.parts[1])}
	}
	return []string{e.Name}
}

func (w *World) hop(subject, a int) Hop {
	f, _ := w.Entities[subject].fact(a)
	return Hop{Subject: w.Entities[subject].Name, Label: attributes[a].label, Value: f.Value, DocID: w.Entities[subject].DocID}
}

// objective draws one objective about a random non-distractor entity.
func (w *World) objective(r *rand.Rand, real []int) (Objective, bool) {
	s := real[r.IntN(len(real))]
	e := &w.Entities[s]
	attrs := w.askable(e.Kind)
	if r.Float64() < w.Config.TwoHopRate {
		var rels []int
		for _, a := range attrs {
			if attributes[a].target != "" {
				rels = append(rels, a)
			}
		}
		if len(rels) > 0 {
			rel := rels[r.IntN(len(rels))]
			mid, _ := e.fact(rel)
			second := w.askable(w.Entities[mid.Ref].Kind)
			a := second[r.IntN(len(second))]
			f, _ := w.Entities[mid.Ref].fact(a)
			if f.Ref == s {
				return Objective{}, false // "the capital of the country of X" is X: not a two-hop question
			}
			phrase := fill(attributes[rel].relation, e.Name, "")
			return Objective{
				Question: fill(attributes[a].question, phrase, ""),
				Aliases:  w.aliases(f),
				Hops:     []Hop{w.hop(s, rel), w.hop(mid.Ref, a)},
			}, true
		}
	}
	a := attrs[r.IntN(len(attrs))]
	f, _ := e.fact(a)
	return Objective{Question: fill(attributes[a].question, e.Name, ""), Aliases: w.aliases(f), Hops: []Hop{w.hop(s, a)}}, true
}

// askable are the attributes of a kind a question may ask for.
func (w *World) askable(kind Kind) []int {
	var out []int
	for _, a := range attrsOf(kind) {
		if !w.Config.NoYearQuestions || !attributes[a].isYear() {
			out = append(out, a)
		}
	}
	return out
}

// questions draws n questions of k distinct objectives each, none in seen.
// questions draws n distinct questions of k objectives each, or of kmax > k: of a count
// drawn uniformly from k..kmax per question.
func (w *World) questions(r *rand.Rand, split string, k, kmax, n int, seen map[string]bool) ([]Prompt, error) {
	var real []int
	for i, e := range w.Entities {
		if e.Twin < 0 {
			real = append(real, i)
		}
	}
	if seen == nil {
		seen = map[string]bool{}
	}
	var out []Prompt
	kmin := k
	for tries := 0; len(out) < n; tries++ {
		if tries > 50*n+1000 {
			return nil, fmt.Errorf("split %s, k=%d: only %d distinct questions of %d; enlarge the world: %w", split, k, len(out), n, ErrConfig)
		}
		if kmax > kmin {
			k = kmin + r.IntN(kmax-kmin+1)
		}
		var objs []Objective
		used := map[string]bool{}
		for draws := 0; len(objs) < k; draws++ {
			if draws > 100*k {
				return nil, fmt.Errorf("split %s: cannot draw %d distinct objectives; enlarge the world: %w", split, k, ErrConfig)
			}
			o, ok := w.objective(r, real)
			if !ok || used[o.Question] {
				continue
			}
			used[o.Question] = true
			objs = append(objs, o)
		}
		qs := make([]string, k)
		golds := make([][]string, k)
		for i, o := range objs {
			qs[i], golds[i] = o.Question, o.Aliases
		}
		q := strings.Join(qs, "; ")
		if seen[q] {
			continue
		}
		seen[q] = true
		out = append(out, Prompt{
			UID:        uid(w.Config.Seed, split, k, len(out)),
			DataSource: DataSource, Question: q, Golds: golds, Split: split, K: k, Objectives: objs,
		})
	}
	return out, nil
}

// uid is a stable hash of the source and the index within it.
func uid(seed uint64, split string, k, i int) string {
	sum := sha256.Sum256(fmt.Appendf(nil, "%s/seed=%d/%s/k=%d/%d", DataSource, seed, split, k, i))
	return hex.EncodeToString(sum[:8])
}
