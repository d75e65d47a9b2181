package task

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/mempo/mempo/agent/protocol"
)

func smallConfig(seed uint64) Config {
	c := DefaultConfig()
	c.Seed, c.Train, c.Test = seed, 300, 60
	return c
}

func mustGenerate(t *testing.T, c Config) *World {
	t.Helper()
	w, err := Generate(c)
	if err != nil {
		t.Fatalf("Generate(%+v) = %v", c, err)
	}
	return w
}

// dump serialises everything gen-task and the oracle write.
func dump(t *testing.T, w *World, oc OracleConfig) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := WriteJSONL(&b, w.Docs()); err != nil {
		t.Fatal(err)
	}
	if err := WriteJSONL(&b, append(append([]Prompt{}, w.Train...), w.Test...)); err != nil {
		t.Fatal(err)
	}
	o, err := NewOracle(w, protocol.Default(), NewExact(w, 3), oc)
	if err != nil {
		t.Fatal(err)
	}
	var trs []Trajectory
	for _, q := range w.Test {
		tr, err := o.Play(context.Background(), q)
		if err != nil {
			t.Fatal(err)
		}
		trs = append(trs, tr)
	}
	if err := WriteJSONL(&b, trs); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestGenerateDeterministic(t *testing.T) {
	oc := OracleConfig{Drop: 0.2, Distractor: 0.2, MaxTurns: 16, Seed: 7}
	a := dump(t, mustGenerate(t, smallConfig(1)), oc)
	b := dump(t, mustGenerate(t, smallConfig(1)), oc)
	if !bytes.Equal(a, b) {
		t.Fatalf("two runs with seed 1 differ (%d vs %d bytes)", len(a), len(b))
	}
	if c := dump(t, mustGenerate(t, smallConfig(2)), oc); bytes.Equal(a, c) {
		t.Fatalf("seeds 1 and 2 give identical output")
	}
}

func TestWorld(t *testing.T) {
	c := smallConfig(3)
	w := mustGenerate(t, c)
	twins, real := 0, 0
	for i, e := range w.Entities {
		d := e.Doc()
		if !strings.HasPrefix(d.Contents, `"`+e.Name+`"`+"\n") || d.Title() != `"`+e.Name+`"` {
			t.Fatalf("entity %d doc contents %q: want the quoted title on the first line", i, d.Contents)
		}
		if e.Twin >= 0 {
			twins++
			orig := w.Entities[e.Twin]
			if e.Kind != orig.Kind || e.Name == orig.Name {
				t.Errorf("distractor %q of %q: want same kind, other name", e.Name, orig.Name)
			}
			if diff := differentParts(e.parts, orig.parts); diff != 1 {
				t.Errorf("distractor %q of %q differs in %d name parts, want 1", e.Name, orig.Name, diff)
			}
			continue
		}
		real++
		for _, f := range e.Facts {
			if f.Ref >= 0 && w.Entities[f.Ref].Twin >= 0 {
				t.Errorf("%s %q refers to distractor %q", e.Kind, e.Name, w.Entities[f.Ref].Name)
			}
		}
		if e.Kind == Country {
			a, _ := attrIndex(Country, "capital")
			capital, _ := e.fact(a)
			ca, _ := attrIndex(City, "country")
			in, _ := w.Entities[capital.Ref].fact(ca)
			if in.Ref != i {
				t.Errorf("capital %q of %q lies in %q", capital.Value, e.Name, in.Value)
			}
		}
	}
	if want := c.People + c.Cities + c.Companies + c.Countries; real != want {
		t.Errorf("%d real entities, want %d", real, want)
	}
	if got := float64(twins) / float64(real); math.Abs(got-c.TwinRate) > 0.08 {
		t.Errorf("distractor rate %.3f, want about %.2f", got, c.TwinRate)
	}
	for i, a := range w.Entities {
		for j, b := range w.Entities {
			if i != j && strings.Contains(a.Name, b.Name) {
				t.Fatalf("name %q contains name %q", a.Name, b.Name)
			}
		}
	}

	if len(w.Train) != c.Train || len(w.Test) != c.Test*len(c.TestK) {
		t.Fatalf("%d train, %d test questions, want %d, %d", len(w.Train), len(w.Test), c.Train, c.Test*len(c.TestK))
	}
	uids, questions := map[string]bool{}, map[string]bool{}
	twoHop, objectives := 0, 0
	for _, q := range append(append([]Prompt{}, w.Train...), w.Test...) {
		want := c.TrainK
		if q.Split == "test" {
			want = q.K
		}
		parts := strings.Split(q.Question, "; ")
		if q.K != want || len(q.Golds) != q.K || len(parts) != q.K || len(q.Objectives) != q.K {
			t.Fatalf("question %s: k %d, %d golds, %d parts, want %d", q.UID, q.K, len(q.Golds), len(parts), want)
		}
		if uids[q.UID] || questions[q.Question] {
			t.Fatalf("question %s %q repeated", q.UID, q.Question)
		}
		uids[q.UID], questions[q.Question] = true, true
		for i, o := range q.Objectives {
			objectives++
			last := o.Hops[len(o.Hops)-1]
			if q.Golds[i][0] != last.Value {
				t.Errorf("question %s objective %d: gold %q, last hop value %q", q.UID, i, q.Golds[i][0], last.Value)
			}
			if len(o.Hops) == 2 {
				twoHop++
				if o.Hops[1].Subject != o.Hops[0].Value {
					t.Errorf("question %s objective %d: hop 2 subject %q is not hop 1 value %q", q.UID, i, o.Hops[1].Subject, o.Hops[0].Value)
				}
			}
		}
	}
	if frac := float64(twoHop) / float64(objectives); frac < 0.25 || frac > 0.5 {
		t.Errorf("two-hop fraction %.3f, want near %.2f", frac, c.TwoHopRate)
	}
	for _, k := range c.TestK {
		n := 0
		for _, q := range w.Test {
			if q.K == k {
				n++
			}
		}
		if n != c.Test {
			t.Errorf("%d test questions with k=%d, want %d", n, k, c.Test)
		}
	}
}

func differentParts(a, b []string) int {
	n := 0
	for i := range a {
		if a[i] != b[i] {
			n++
		}
	}
	return n
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		edit func(*Config)
	}{
		{"no people", func(c *Config) { c.People = 0 }},
		{"fewer cities than countries", func(c *Config) { c.Cities = 3 }},
		{"bad twin rate", func(c *Config) { c.TwinRate = 1.5 }},
		{"nan two-hop rate", func(c *Config) { c.TwoHopRate = math.NaN() }},
		{"zero k", func(c *Config) { c.TestK = []int{2, 0} }},
		{"negative train", func(c *Config) { c.Train = -1 }},
		{"train k max below train k", func(c *Config) { c.TrainK, c.TrainKMax = 3, 2 }},
		{"train k max above 32", func(c *Config) { c.TrainKMax = 33 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			tt.edit(&c)
			if _, err := Generate(c); !errors.Is(err, ErrConfig) {
				t.Errorf("Generate() error = %v, want ErrConfig", err)
			}
		})
	}
	if _, err := NewOracle(nil, protocol.Default(), nil, OracleConfig{Drop: -0.1, MaxTurns: 4}); !errors.Is(err, ErrConfig) {
		t.Errorf("NewOracle(drop -0.1) error = %v, want ErrConfig", err)
	}
}

// TestTrainKMix: with --train-k-max each training question draws its objective count from
// TrainK..TrainKMax, every count occurs, the test sets keep theirs, and a config without a
// mix serialises as before (gen-task's cache key unchanged).
func TestTrainKMix(t *testing.T) {
	c := smallConfig(1)
	c.TrainK, c.TrainKMax = 2, 4
	w := mustGenerate(t, c)
	counts := map[int]int{}
	for _, q := range w.Train {
		if len(q.Golds) != q.K || len(q.Objectives) != q.K {
			t.Fatalf("question %s: k %d, %d golds, %d objectives", q.UID, q.K, len(q.Golds), len(q.Objectives))
		}
		counts[q.K]++
	}
	for k := 2; k <= 4; k++ {
		if counts[k] < len(w.Train)/5 {
			t.Errorf("%d of %d training questions with k=%d, want about a third (counts %v)", counts[k], len(w.Train), k, counts)
		}
	}
	if len(counts) != 3 {
		t.Errorf("training counts %v, want k in 2..4 only", counts)
	}
	for _, q := range w.Test {
		if !slices.Contains(c.TestK, q.K) {
			t.Errorf("test question %s: k %d, want one of %v", q.UID, q.K, c.TestK)
		}
	}
	if !bytes.Equal(dump(t, w, OracleConfig{MaxTurns: 16}), dump(t, mustGenerate(t, c), OracleConfig{MaxTurns: 16})) {
		t.Error("two mixed-k worlds with one seed differ")
	}
	b, err := json.Marshal(smallConfig(1))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(b, []byte("train_k_max")) {
		t.Errorf("a config without a mix serialises train_k_max: %s", b)
	}
}

func TestExact(t *testing.T) {
	w := mustGenerate(t, smallConfig(4))
	for i, e := range w.Entities {
		if e.Twin < 0 || len(w.twinOf[e.Twin]) == 0 {
			continue
		}
		orig := w.Entities[e.Twin]
		res, err := NewExact(w, 3).Retrieve(context.Background(), []string{"about " + orig.Name + " please"})
		if err != nil {
			t.Fatal(err)
		}
		if len(res[0]) < 2 || res[0][0].ID != orig.DocID || res[0][1].ID != w.Entities[w.twinOf[e.Twin][0]].DocID {
			t.Fatalf("Retrieve(%q) = %v, want its document then its distractor (entity %d)", orig.Name, res[0], i)
		}
		return
	}
	t.Fatal("no entity with a distractor")
}

func TestRetention(t *testing.T) {
	facts := []Hop{{Subject: "Ax Works", Value: "Bo Lin"}, {Subject: "Bo Lin", Value: "1950"}, {Subject: "Cy", Value: "1800"}}
	obs := []string{`<information>Doc 1(Title: "Ax Works") Ax Works was founded by Bo Lin.</information>`, `Bo Lin was born in 1950.`}
	tests := []struct {
		name             string
		mem              string
		wantFound, wantK int
	}{
		{"all kept", "ax works founder: bo lin; Bo Lin birth year: 1950", 2, 2},
		{"one dropped", "Bo Lin birth year: 1950", 2, 2}, // "Bo Lin" still appears as a subject
		{"value dropped", "Ax Works founder: Bo Lin", 2, 1},
		{"empty", "", 2, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			found, kept := Retention(facts, obs, tt.mem)
			if found != tt.wantFound || kept != tt.wantK {
				t.Errorf("Retention(%q) = %d, %d, want %d, %d", tt.mem, found, kept, tt.wantFound, tt.wantK)
			}
		})
	}
}

// TestPhrases checks the attribute table's contract: the value ends every phrase, the
// query is the statement up to its value, and within a kind no query is a prefix of
// another's, so the words after a query in a document name one fact.
func TestPhrases(t *testing.T) {
	for i, a := range attributes {
		if !strings.HasSuffix(a.phrase, " {v}") || strings.Count(a.phrase, "{x}") != 1 {
			t.Errorf("attribute %s/%s: phrase %q must name the subject once and end with the value", a.kind, a.name, a.phrase)
		}
		if s, q := a.statement("Ax Bo", "Cy"), a.query("Ax Bo"); s != q+" Cy" {
			t.Errorf("attribute %s/%s: statement %q is not query %q + value", a.kind, a.name, s, q)
		}
		for j, b := range attributes {
			if i != j && a.kind == b.kind && strings.HasPrefix(b.query("X")+" ", a.query("X")+" ") {
				t.Errorf("%s: query %q is a prefix of %q", a.kind, a.query("X"), b.query("X"))
			}
		}
	}
}

// TestNoYearQuestions: with NoYearQuestions no hop of any question asks for a year,
// while the documents still state every year fact; without it some questions do.
func TestNoYearQuestions(t *testing.T) {
	asksYear := func(w *World) bool {
		for _, p := range append(slices.Clone(w.Train), w.Test...) {
			for _, h := range p.Facts() {
				e, _ := w.Lookup(h.Subject)
				if a, ok := attrIndex(w.Entities[e].Kind, h.Label); ok && attributes[a].isYear() {
					return true
				}
			}
		}
		return false
	}
	c := smallConfig(4)
	with, err := Generate(c)
	if err != nil {
		t.Fatal(err)
	}
	c.NoYearQuestions = true
	without, err := Generate(c)
	if err != nil {
		t.Fatal(err)
	}
	if !asksYear(with) || asksYear(without) {
		t.Errorf("asks for a year: default %v, NoYearQuestions %v; want true, false", asksYear(with), asksYear(without))
	}
	if !slices.Equal(with.Docs(), without.Docs()) {
		t.Error("NoYearQuestions changed the corpus; it should only change the questions")
	}
}
