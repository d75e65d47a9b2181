package update

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/mempo/mempo/format"
	"github.com/mempo/mempo/format/formattest"
	"github.com/mempo/mempo/jobs"
	"github.com/mempo/mempo/model/bpe"
	"github.com/mempo/mempo/model/qwen2"
	"github.com/mempo/mempo/model/torch"
	"github.com/sugarme/gotch/ts"
)

// tinyConfig is a two-layer GQA model small enough that an update runs in well under a
// second on one core.
func tinyConfig(vocab int) qwen2.Config {
	c, err := qwen2.Preset("tiny", vocab)
	if err != nil {
		panic(err)
	}
	c.HiddenSize, c.IntermediateSize, c.NumLayers, c.NumHeads, c.NumKVHeads = 32, 64, 2, 4, 2
	c.MaxPositions = 64
	return c
}

const fixtureVocab = 61

// writePolicy saves a freshly initialised tiny model with a stand-in tokenizer.json.
func writePolicy(t testing.TB, dir string, cfg qwen2.Config, seed uint64) {
	t.Helper()
	m, err := qwen2.New(cfg, qwen2.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Drop()
	if err := m.Init(seed); err != nil {
		t.Fatal(err)
	}
	if err := m.Save(dir, 0); err != nil {
		t.Fatal(err)
	}
	// The update never parses the tokenizer; with its companion files present it is
	// copied to the new checkpoint as it is.
	for _, name := range append([]string{format.TokenizerFile}, bpe.CompanionFiles...) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(`{"stand-in": true}`+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// turn is one fixture turn before it becomes rows of the three datasets.
type turn struct {
	uid          string
	sample, turn int32
	ctx, resp    []int32
	adv          []float32
}

// fixture is a policy checkpoint, its reference (the same weights) and the three
// datasets of one iteration.
type fixture struct {
	dir   string
	in    Inputs
	turns []turn
}

// randomTurns draws trajectories of 1–3 turns with contexts of 3–12 and responses of
// 1–6 tokens and advantages ~ N(0, 1).
func randomTurns(rng *rand.Rand, trajectories int) []turn {
	var out []turn
	for i := range trajectories {
		uid := string(rune('a'+i/2)) + "q"
		for tn := range 1 + rng.IntN(3) {
			tr := turn{uid: uid, sample: int32(i % 2), turn: int32(tn)}
			for range 3 + rng.IntN(10) {
				tr.ctx = append(tr.ctx, int32(rng.IntN(fixtureVocab)))
			}
			for range 1 + rng.IntN(6) {
				tr.resp = append(tr.resp, int32(rng.IntN(fixtureVocab)))
				tr.adv = append(tr.adv, float32(rng.NormFloat64()))
			}
			out = append(out, tr)
		}
	}
	return out
}

// newFixture writes the policy (and a reference with the same weights), then the
// rollouts, logprobs and advantages of turns. Old and reference log-probs are the
// policy's own, each pair scored alone as a micro-token-budget of 1 trains it, so the
// first mini-batch sees ratio 1 and KL 0 exactly.
func newFixture(t testing.TB, turns []turn) *fixture {
	t.Helper()
	return newFixtureAt(t, turns, 1)
}

// newFixtureAt scores the old log-probs at temperature temp and records it in the
// logprobs manifest, as the log-prob stage does.
func newFixtureAt(t testing.TB, turns []turn, temp float64) *fixture {
	t.Helper()
	dir := t.TempDir()
	f := &fixture{dir: dir, turns: turns, in: Inputs{
		Policy: filepath.Join(dir, "policy"), Ref: filepath.Join(dir, "ref"),
		Rollouts: filepath.Join(dir, "rollouts"), Logprobs: filepath.Join(dir, "logprobs"), Advantages: filepath.Join(dir, "advantages"),
	}}
	cfg := tinyConfig(fixtureVocab)
	writePolicy(t, f.in.Policy, cfg, 7)
	writePolicy(t, f.in.Ref, cfg, 7)
	m, err := qwen2.Load(f.in.Policy, qwen2.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Drop()
	pairs := make([]qwen2.Pair, len(turns))
	for i, tr := range turns {
		pairs[i] = qwen2.Pair{Context: qwen2.Tokens(tr.ctx), Response: qwen2.Tokens(tr.resp)}
	}
	scored, err := m.LogProbs(pairs, qwen2.ScoreConfig{TokenBudget: 1, Temperature: temp})
	if err != nil {
		t.Fatal(err)
	}
	var rolls []format.Rollout
	var lps []format.Logprob
	var advs []format.Advantage
	for i, tr := range turns {
		rolls = append(rolls, format.Rollout{UID: tr.uid, Sample: tr.sample, Turn: tr.turn, PromptIDs: tr.ctx, ResponseIDs: tr.resp})
		lps = append(lps, format.Logprob{UID: tr.uid, Sample: tr.sample, Turn: tr.turn, OldLogprobs: scored[i].LogProbs, RefLogprobs: scored[i].LogProbs})
		advs = append(advs, format.Advantage{UID: tr.uid, Sample: tr.sample, Turn: tr.turn, Advantages: tr.adv})
	}
	if _, err := formattest.WriteDataset(f.in.Rollouts, "test", [][]format.Rollout{rolls}); err != nil {
		t.Fatal(err)
	}
	if _, err := formattest.WriteDataset(f.in.Logprobs, "test", [][]format.Logprob{lps}); err != nil {
		t.Fatal(err)
	}
	man, err := format.ReadManifest(f.in.Logprobs)
	if err != nil {
		t.Fatal(err)
	}
	man.Config = fmt.Appendf(nil, `{"temperature":%v}`, temp)
	if err := format.WriteManifest(f.in.Logprobs, man); err != nil {
		t.Fatal(err)
	}
	recordScoring(t, f.in)
	if _, err := formattest.WriteDataset(f.in.Advantages, "test", [][]format.Advantage{advs}); err != nil {
		t.Fatal(err)
	}
	return f
}

// recordScoring records in in.Logprobs' manifest the inputs it was scored from, as
// mempo-logprob does: in's rollouts, policy and reference, each by digest.
func recordScoring(t testing.TB, in Inputs) {
	t.Helper()
	man, err := format.ReadManifest(in.Logprobs)
	if err != nil {
		t.Fatal(err)
	}
	rollouts, err := jobs.DatasetInput("rollouts", in.Rollouts)
	if err != nil {
		t.Fatal(err)
	}
	policy, err := jobs.CheckpointInput("policy", in.Policy)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := jobs.CheckpointInput("ref", in.Ref)
	if err != nil {
		t.Fatal(err)
	}
	man.Stage, man.Inputs = "logprob", []format.Input{rollouts, policy, ref}
	if err := format.WriteManifest(in.Logprobs, man); err != nil {
		t.Fatal(err)
	}
}

// testConfig trains fast enough to see the policy move in one step.
func testConfig() Config {
	c := DefaultConfig()
	c.AdamW.LR = 1e-3
	c.MiniBatches = 2
	c.MicroTokenBudget = 1
	return c
}

// liveTensors counts tensors gotch has created and not yet freed.
func liveTensors() int { return len(ts.ExistingTensors) }

// gradValues copies the gradient of every weight of m to the host, in order.
func gradValues(t *testing.T, m *qwen2.Model) []float64 {
	t.Helper()
	var out []float64
	for _, w := range m.Weights() {
		g, err := w.Tensor.Grad(false)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, torch.Values(g)...)
		g.MustDrop()
	}
	return out
}

// responseLogp is log π(response | context) of each turn under the checkpoint in dir.
func responseLogp(t *testing.T, dir string, turns []turn) [][]float32 {
	t.Helper()
	m, err := qwen2.Load(dir, qwen2.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Drop()
	pairs := make([]qwen2.Pair, len(turns))
	for i, tr := range turns {
		pairs[i] = qwen2.Pair{Context: qwen2.Tokens(tr.ctx), Response: qwen2.Tokens(tr.resp)}
	}
	scored, err := m.LogProbs(pairs, qwen2.ScoreConfig{TokenBudget: 1})
	if err != nil {
		t.Fatal(err)
	}
	out := make([][]float32, len(turns))
	for i, s := range scored {
		out[i] = s.LogProbs
	}
	return out
}
