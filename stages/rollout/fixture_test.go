package rollout

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/mempo/mempo/agent/protocol"
	"github.com/mempo/mempo/agent/task"
	"github.com/mempo/mempo/format"
	"github.com/mempo/mempo/format/formattest"
	"github.com/mempo/mempo/jobs"
	"github.com/mempo/mempo/model/bpe"
	"github.com/mempo/mempo/stages/gentask"
	"github.com/mempo/mempo/stages/index"
	"github.com/mempo/mempo/stages/initmodel"
)

// fixture is what every test reads: a small synthetic world, its BM25 index, a tiny
// random policy with a tokenizer trained on the corpus, and prompts datasets. It is
// built once per test binary.
type fixture struct {
	dir    string
	world  *task.World
	byUID  map[string]task.Prompt
	index  string
	policy string
	tok    *bpe.Tokenizer
	train  string         // prompts dataset of the training questions (K = 2)
	test   map[int]string // prompts dataset per test K
}

var (
	fixOnce sync.Once
	fix     *fixture
	fixErr  error
	fixRoot string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if fixRoot != "" {
		os.RemoveAll(fixRoot)
	}
	os.Exit(code)
}

func testFixture(t testing.TB) *fixture {
	t.Helper()
	fixOnce.Do(func() { fix, fixErr = buildFixture() })
	if fixErr != nil {
		t.Fatal(fixErr)
	}
	return fix
}

func buildFixture() (*fixture, error) {
	root, err := os.MkdirTemp("", "rollout-test-")
	if err != nil {
		return nil, err
	}
	fixRoot = root
	cfg := task.DefaultConfig()
	cfg.People, cfg.Cities, cfg.Companies, cfg.Countries = 24, 8, 8, 4
	cfg.Train, cfg.Test, cfg.TestK = 6, 3, []int{2, 4, 6}
	w, err := task.Generate(cfg)
	if err != nil {
		return nil, err
	}
	f := &fixture{dir: root, world: w, byUID: map[string]task.Prompt{}, test: map[int]string{}}
	var buf bytes.Buffer
	if err := task.WriteJSONL(&buf, w.Docs()); err != nil {
		return nil, err
	}
	corpus := filepath.Join(root, "corpus.jsonl")
	if err := os.WriteFile(corpus, buf.Bytes(), 0o644); err != nil {
		return nil, err
	}
	f.index = filepath.Join(root, "index")
	if _, err := index.Run(context.Background(), index.Config{Corpus: corpus}, jobs.Spec{Out: f.index}); err != nil {
		return nil, err
	}
	f.policy = filepath.Join(root, "policy")
	icfg := initmodel.DefaultConfig()
	icfg.VocabSize = 700
	if _, err := initmodel.Run(context.Background(), icfg, initmodel.Inputs{Corpus: []string{corpus}}, jobs.Spec{Out: f.policy}); err != nil {
		return nil, err
	}
	if f.tok, err = bpe.Load(filepath.Join(f.policy, format.TokenizerFile)); err != nil {
		return nil, err
	}
	write := func(name string, ps []task.Prompt) (string, error) {
		rows := make([]format.Prompt, len(ps))
		for i, p := range ps {
			f.byUID[p.UID] = p
			rows[i] = gentask.PromptRow(p, i) // the rows gen-task writes, supporting facts included
		}
		dir := filepath.Join(root, name)
		_, err := formattest.WriteDataset(dir, "test", [][]format.Prompt{rows}, format.WithOptional("facts"))
		return dir, err
	}
	if f.train, err = write("prompts-train", w.Train); err != nil {
		return nil, err
	}
	for _, k := range cfg.TestK {
		var ps []task.Prompt
		for _, p := range w.Test {
			if p.K == k {
				ps = append(ps, p)
			}
		}
		if f.test[k], err = write(fmt.Sprintf("prompts-test-k%d", k), ps); err != nil {
			return nil, err
		}
	}
	return f, nil
}

// turnKey names one generated turn.
type turnKey struct {
	uid          string
	sample, turn int
}

// scripted is a sampler that answers each request with text from a script and records
// what it was asked and what it returned, so tests can compare the rows with it.
type scripted struct {
	tok    *bpe.Tokenizer
	script func(r request) (text string, truncated bool)

	mu      sync.Mutex
	asked   map[turnKey]request
	gave    map[turnKey]protocol.Generation
	batches []int // requests per call
}

func newScripted(tok *bpe.Tokenizer, script func(r request) (string, bool)) *scripted {
	return &scripted{tok: tok, script: script, asked: map[turnKey]request{}, gave: map[turnKey]protocol.Generation{}}
}

func (s *scripted) sample(_ context.Context, reqs []request) ([]protocol.Generation, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.batches = append(s.batches, len(reqs))
	out := make([]protocol.Generation, len(reqs))
	for i, r := range reqs {
		text, trunc := s.script(r)
		ids := s.tok.Encode(text)
		lp := make([]float32, len(ids))
		for j := range lp {
			lp[j] = -float32(j+1+r.Turn) / 8
		}
		out[i] = protocol.Generation{IDs: ids, Logprobs: lp, Truncated: trunc}
		k := turnKey{r.UID, r.Sample, r.Turn}
		s.asked[k] = r
		s.gave[k] = out[i]
	}
	return out, nil
}

// loader returns s as the policy, whatever the checkpoint holds.
func (s *scripted) loader() loader {
	return func(Config, string, *bpe.Tokenizer) (sampler, func(), error) { return s, func() {}, nil }
}

// oracle scripts a competent agent from the task's ground truth: one search per fact
// of the question, a memory listing every fact found so far, then the gold answers.
func (f *fixture) oracle(r request) (string, bool) {
	p := protocol.Default()
	q := f.byUID[r.UID]
	facts := q.Facts()
	var mem []string
	for _, h := range facts[:min(r.Turn, len(facts))] {
		mem = append(mem, h.Subject+" "+h.Label+": "+h.Value)
	}
	memory := strings.Join(mem, "; ")
	if r.Turn < len(facts) {
		h := facts[r.Turn]
		return p.Render(memory, "I need the "+h.Label+" of "+h.Subject+".", protocol.Search, h.Subject+" "+h.Label), false
	}
	var answers []string
	for _, g := range q.Golds {
		answers = append(answers, g[0])
	}
	return p.Render(memory, "I have every part.", protocol.Answer, p.JoinAnswers(answers)), false
}
