package logprob

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"

	"github.com/mempo/mempo/format"
	"github.com/mempo/mempo/format/formattest"
	"github.com/mempo/mempo/jobs"
	"github.com/mempo/mempo/model/bpe"
	"github.com/mempo/mempo/model/qwen2"
	"github.com/mempo/mempo/model/sample"
	"github.com/sugarme/gotch/ts"
)

// corpus trains the tests' tokenizer: the words the fixtures use, so they encode to
// few tokens.
var corpus = []string{
	"where is the tower? which city is cold? the tower is in paris. oslo is cold.",
	"Doc 1(Title: Tower) The tower stands in paris.\nDoc 2(Title: Oslo) oslo is a cold city.",
	"remember: tower paris; city oslo. search tower. answer paris; oslo.",
}

func newTokenizer(t testing.TB) *bpe.Tokenizer {
	t.Helper()
	tok, err := bpe.Train(slices.Values(corpus), bpe.TrainConfig{VocabSize: 400, Special: bpe.DefaultSpecial()})
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func liveTensors() int { return len(ts.ExistingTensors) }

// newModel builds a tiny-preset model for tok, initialised from seed; edit, when set,
// changes the config first (e.g. fewer positions).
func newModel(t testing.TB, tok *bpe.Tokenizer, seed uint64, edit func(*qwen2.Config)) *qwen2.Model {
	t.Helper()
	c, err := qwen2.Preset("tiny", tok.VocabSize())
	if err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		edit(&c)
	}
	m, err := qwen2.New(c, qwen2.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Init(seed); err != nil {
		t.Fatal(err)
	}
	return m
}

// save commits m and tok as a checkpoint at dir, as a training stage would, and
// returns the digest its rollouts record.
func save(t testing.TB, m *qwen2.Model, tok *bpe.Tokenizer, dir string) string {
	t.Helper()
	art, _, err := jobs.Begin(jobs.Spec{Out: dir, Force: true}, jobs.Key{})
	if err != nil {
		t.Fatal(err)
	}
	defer art.Release()
	if err := m.Save(art.Tmp, 0); err != nil {
		t.Fatal(err)
	}
	if err := tok.Save(filepath.Join(art.Tmp, format.TokenizerFile)); err != nil {
		t.Fatal(err)
	}
	if _, err := art.Publish(format.Commit{Stage: "fixture"}); err != nil {
		t.Fatal(err)
	}
	in, err := jobs.CheckpointInput("policy", dir)
	if err != nil {
		t.Fatal(err)
	}
	return jobs.DigestOf(in)
}

func narrow(ids []int64) []int32 {
	out := make([]int32, len(ids))
	for i, id := range ids {
		out[i] = int32(id)
	}
	return out
}

// question is one fixture question with its golds.
type question struct {
	uid, text string
	golds     [][]string
}

var questions = []question{
	{"q1", "where is the tower?", [][]string{{"paris", "Paris, France"}}},
	{"q2", "where is the tower? which city is cold?", [][]string{{"paris"}, {"oslo"}}},
}

func promptRows() [][]format.Prompt {
	var rows []format.Prompt
	for _, q := range questions {
		rows = append(rows, format.Prompt{UID: q.uid, Question: q.text, Golds: q.golds})
	}
	return [][]format.Prompt{rows}
}

// genRollouts samples mempo-style trajectories with m at temperature 1: turn t sees
// the prompt, the previous memory span and the previous observation, and the first
// three response tokens play the memory span on two turns out of three. Each question
// is one shard; every trajectory has turns turns. With twin, the last sample draws with
// the first's seeds and memory spans, so it writes the first's trajectory word for word,
// as samples of a confident policy do.
func genRollouts(t testing.TB, m *qwen2.Model, tok *bpe.Tokenizer, digest string, samples, turns int, twin bool) [][]format.Rollout {
	t.Helper()
	obsText := "<information>Doc 1(Title: Tower) The tower stands in paris.</information>"
	obs := tok.Encode(obsText)
	var shards [][]format.Rollout
	for qi, q := range questions {
		prompt := tok.Encode(bpe.ImStart + "user\n" + q.text + bpe.ImEnd + "\n" + bpe.ImStart + "assistant\n")
		rows := make([][]format.Rollout, samples)
		ctx := make([][]int32, samples)
		for s := range ctx {
			ctx[s] = prompt
		}
		for turn := range turns {
			reqs := make([]qwen2.Request, samples)
			src := func(s int) int { // the sample whose seeds and spans s takes
				if twin && s == samples-1 {
					return 0
				}
				return s
			}
			for s := range reqs {
				reqs[s] = qwen2.Request{Prompt: qwen2.Tokens(ctx[s]), Seed: uint64(1000*qi + 10*src(s) + turn)}
			}
			gen, err := m.Generate(reqs, sample.Config{Temperature: 1, MaxNewTokens: 8})
			if err != nil {
				t.Fatal(err)
			}
			for s, c := range gen {
				resp := narrow(c.Tokens)
				r := format.Rollout{UID: q.uid, Sample: int32(s), Turn: int32(turn), PromptIDs: ctx[s],
					ResponseIDs: resp, SamplingLogprobs: c.LogProbs, Observation: obsText, ObservationIDs: obs, PolicyDigest: digest}
				if (turn+src(s))%3 != 2 {
					r.MemStart, r.MemEnd = 0, int32(min(3, len(resp)))
				}
				rows[s] = append(rows[s], r)
				next := slices.Clone(prompt)
				next = append(next, resp[r.MemStart:r.MemEnd]...)
				ctx[s] = append(next, obs...)
			}
		}
		shards = append(shards, slices.Concat(rows...))
	}
	return shards
}

// fixture is a stage input on disk: prompts, rollouts and a policy checkpoint.
type fixture struct {
	dir    string
	tok    *bpe.Tokenizer
	in     Inputs
	digest string
	rolls  [][]format.Rollout
}

// newFixture saves a tiny policy and generates rollouts with it; the reference is the
// policy's own directory unless the test changes in.Ref.
func newFixture(t testing.TB, samples, turns int) *fixture {
	t.Helper()
	return fixtureOf(t, samples, turns, false)
}

// fixtureOf is newFixture, whose last sample, with twin, repeats the first's
// trajectory (see genRollouts).
func fixtureOf(t testing.TB, samples, turns int, twin bool) *fixture {
	t.Helper()
	dir := t.TempDir()
	tok := newTokenizer(t)
	m := newModel(t, tok, 7, nil)
	defer m.Drop()
	f := &fixture{dir: dir, tok: tok}
	f.in.Policy = filepath.Join(dir, "policy")
	f.digest = save(t, m, tok, f.in.Policy)
	f.in.Ref = f.in.Policy
	f.rolls = genRollouts(t, m, tok, f.digest, samples, turns, twin)
	f.writeInputs(t)
	return f
}

func (f *fixture) writeInputs(t testing.TB) {
	t.Helper()
	f.in.Prompts = filepath.Join(f.dir, "prompts")
	f.in.Rollouts = filepath.Join(f.dir, "rollouts")
	if _, err := formattest.WriteDataset(f.in.Prompts, "test", promptRows()); err != nil {
		t.Fatal(err)
	}
	if _, err := formattest.WriteDataset(f.in.Rollouts, "test", f.rolls); err != nil {
		t.Fatal(err)
	}
}

func testConfig() Config {
	c := DefaultConfig()
	c.TokenBudget, c.Chunk = 512, 16
	return c
}

// run runs the stage into dir/name and returns the rows written.
func (f *fixture) run(t testing.TB, cfg Config, name string, spec jobs.Spec) (*jobs.Result, []format.Logprob) {
	t.Helper()
	spec.Out = filepath.Join(f.dir, name)
	res, err := Run(context.Background(), cfg, f.in, spec)
	if err != nil {
		t.Fatal(err)
	}
	return res, readLogprobs(t, spec.Out)
}

func readLogprobs(t testing.TB, dir string) []format.Logprob {
	t.Helper()
	d, err := format.OpenDataset(dir)
	if err != nil {
		t.Fatal(err)
	}
	r, err := format.OpenShards[format.Logprob](d)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := format.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

func loadModel(t testing.TB, dir string) *qwen2.Model {
	t.Helper()
	m, err := qwen2.Load(dir, qwen2.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Drop)
	return m
}

func key(r format.Logprob) string { return fmt.Sprintf("%s/%d/%d", r.UID, r.Sample, r.Turn) }
