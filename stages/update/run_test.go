package update

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sugarme/gotch/ts"

	"github.com/mempo/mempo/format"
	"github.com/mempo/mempo/jobs"
	"github.com/mempo/mempo/jobs/jobstest"
	"github.com/mempo/mempo/model/bpe"
	"github.com/mempo/mempo/model/qwen2"
	"github.com/mempo/mempo/train"
)

func readMetrics(t *testing.T, dir string) []Metric {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, jobs.MetricsName))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []Metric
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var m Metric
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}

// TestAdvantageSign trains one single-token turn for one step: with a positive
// advantage the token's probability must rise, with a negative one it must fall.
func TestAdvantageSign(t *testing.T) {
	for _, tt := range []struct {
		name string
		adv  float32
	}{{"positive", 1}, {"negative", -1}} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, []turn{{uid: "q", ctx: []int32{3, 14, 15, 9, 2}, resp: []int32{6}, adv: []float32{tt.adv}}})
			cfg := testConfig()
			cfg.MiniBatches = 1
			out := filepath.Join(f.dir, "out")
			if _, err := Run(context.Background(), cfg, f.in, jobs.Spec{Out: out, Seed: 1}); err != nil {
				t.Fatal(err)
			}
			before := responseLogp(t, f.in.Policy, f.turns)[0][0]
			after := responseLogp(t, out, f.turns)[0][0]
			t.Logf("log p: %.6f → %.6f", before, after)
			if up := after > before; up != (tt.adv > 0) {
				t.Errorf("advantage %v: log p of the token went %v → %v", tt.adv, before, after)
			}
		})
	}
}

// TestRun runs two mini-batches with policy = reference and checks the first one's KL
// is exactly 0 (and its ratio exactly 1), the checkpoint artifact round trip, the
// cache hit, and that a second iteration continues the optimizer state.
func TestRun(t *testing.T) {
	base := liveTensors()
	f := newFixture(t, randomTurns(rand.New(rand.NewPCG(3, 4)), 6))
	cfg := testConfig()
	cfg.Objective.KLCoef = 0.05
	out := filepath.Join(f.dir, "iter-1")
	res, err := Run(context.Background(), cfg, f.in, jobs.Spec{Out: out, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if res.Hit || res.State.Step != 2 || res.State.Iteration != 1 {
		t.Fatalf("Run = hit %v step %d iteration %d, want a fresh run at step 2, iteration 1", res.Hit, res.State.Step, res.State.Iteration)
	}
	mets := readMetrics(t, out)
	if len(mets) != 2 {
		t.Fatalf("_metrics.jsonl has %d lines, want 2", len(mets))
	}
	if first := mets[0]; first.KL != 0 || first.PPOKL != 0 || first.ClipFrac != 0 {
		t.Errorf("first mini-batch: kl %v ppo_kl %v clipfrac %v, want exactly 0 with policy = reference = old", first.KL, first.PPOKL, first.ClipFrac)
	}
	if second := mets[1]; !(second.KL > 0) || second.PPOKL == 0 {
		t.Errorf("second mini-batch: kl %v ppo_kl %v, want the policy moved away from the reference", second.KL, second.PPOKL)
	}
	for _, m := range mets {
		if m.GradNorm <= 0 || m.LR != cfg.AdamW.LR || m.Tokens <= 0 || m.Seqs <= 0 {
			t.Errorf("metric line %+v: want grad_norm, lr, tokens and seqs set", m)
		}
	}

	// The artifact: an HF directory qwen2.Load reads, with tokenizer, optimizer and state.
	m, err := qwen2.Load(out, qwen2.Options{})
	if err != nil {
		t.Fatal(err)
	}
	m.Drop()
	for _, name := range []string{format.TokenizerFile, train.OptimizerFile, format.TrainerStateFile, format.CommitFile, qwen2.GenerationConfigFile} {
		if _, err := os.Stat(filepath.Join(out, name)); err != nil {
			t.Errorf("checkpoint lacks %s: %v", name, err)
		}
	}
	if _, err := os.Stat(out + ".tmp-" + res.Key.Short()); !os.IsNotExist(err) {
		t.Errorf("temp dir left after publish: %v", err)
	}
	c, err := format.ReadCommit(out)
	if err != nil || c.CacheKey != res.Key.String() || len(c.Inputs) != 5 {
		t.Fatalf("ReadCommit = %+v, %v; want the run's key and 5 inputs", c, err)
	}
	jobstest.CheckModes(t, out)

	again, err := Run(context.Background(), cfg, f.in, jobs.Spec{Out: out, Seed: 1})
	if err != nil || !again.Hit {
		t.Fatalf("second Run = %+v, %v; want a cache hit", again, err)
	}
	other, err := Run(context.Background(), cfg, f.in, jobs.Spec{Out: filepath.Join(f.dir, "seed-2"), Seed: 2})
	if err != nil || other.Hit || other.Key == res.Key {
		t.Fatalf("Run with another seed = %+v, %v; want another key", other, err)
	}

	// Iteration 2 trains iteration 1's checkpoint: its optimizer state is an input. Its
	// log-probs stand in for ones scored with that policy (same rows, its digest).
	next := f.in
	next.Policy = out
	next.Logprobs = filepath.Join(f.dir, "logprobs-2")
	if err := os.CopyFS(next.Logprobs, os.DirFS(f.in.Logprobs)); err != nil {
		t.Fatal(err)
	}
	recordScoring(t, next)
	// A flipped byte in the optimizer state it continues from is refused.
	flipped := next
	flipped.Policy = filepath.Join(f.dir, "iter-1-flipped")
	if err := os.CopyFS(flipped.Policy, os.DirFS(out)); err != nil {
		t.Fatal(err)
	}
	opt := filepath.Join(flipped.Policy, train.OptimizerFile)
	b, err := os.ReadFile(opt)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-3] ^= 1
	if err := os.WriteFile(opt, b, 0o644); err != nil {
		t.Fatal(err)
	}
	flipped.Logprobs = filepath.Join(f.dir, "logprobs-flipped")
	if err := os.CopyFS(flipped.Logprobs, os.DirFS(f.in.Logprobs)); err != nil {
		t.Fatal(err)
	}
	recordScoring(t, flipped)
	if _, err := Run(context.Background(), cfg, flipped, jobs.Spec{Out: filepath.Join(f.dir, "iter-2-flipped"), Seed: 1}); !errors.Is(err, format.ErrCorrupt) || !strings.Contains(err.Error(), train.OptimizerFile) {
		t.Errorf("Run continuing from a flipped optimizer state = %v, want ErrCorrupt naming %s", err, train.OptimizerFile)
	}
	res2, err := Run(context.Background(), cfg, next, jobs.Spec{Out: filepath.Join(f.dir, "iter-2"), Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if res2.State.Step != 4 || res2.State.Iteration != 2 {
		t.Errorf("iteration 2: step %d iteration %d, want 4 and 2 (optimizer state continued)", res2.State.Step, res2.State.Iteration)
	}
	// A committed policy is keyed by its commit record, not by re-hashing its files.
	c2, err := format.ReadCommit(res2.Dir)
	if err != nil {
		t.Fatal(err)
	}
	if want, _ := jobs.CheckpointInput("policy", out); c2.Inputs[0] != want || !strings.HasPrefix(want.Digest, "checkpoint:") {
		t.Errorf("iteration 2's policy input = %+v, want %+v keyed by the commit record", c2.Inputs[0], want)
	}
	if got := liveTensors(); got != base {
		t.Errorf("live tensors = %d after the runs, want %d", got, base)
	}
}

// TestTemperature: an update at the temperature the old log-probs were scored at starts
// from ratio 1 (ppo_kl exactly 0 on the first mini-batch); at another temperature it is
// refused before any step.
func TestTemperature(t *testing.T) {
	f := newFixtureAt(t, randomTurns(rand.New(rand.NewPCG(9, 10)), 4), 0.6)
	cfg := testConfig()
	cfg.Temperature = 0.6
	out := filepath.Join(f.dir, "t06")
	if _, err := Run(context.Background(), cfg, f.in, jobs.Spec{Out: out, Seed: 1}); err != nil {
		t.Fatal(err)
	}
	if first := readMetrics(t, out)[0]; first.PPOKL != 0 || first.ClipFrac != 0 {
		t.Errorf("first mini-batch at the scoring temperature: ppo_kl %v clipfrac %v, want 0", first.PPOKL, first.ClipFrac)
	}
	cfg.Temperature = 1
	_, err := Run(context.Background(), cfg, f.in, jobs.Spec{Out: filepath.Join(f.dir, "t1"), Seed: 1})
	if !errors.Is(err, ErrInput) {
		t.Fatalf("Run at temperature 1 on log-probs scored at 0.6 = %v, want ErrInput", err)
	}
	t.Log(err)
}

func TestRunRejects(t *testing.T) {
	f := newFixture(t, randomTurns(rand.New(rand.NewPCG(5, 6)), 4))
	cfg := testConfig()

	t.Run("reference vocab", func(t *testing.T) {
		in := f.in
		in.Ref = filepath.Join(f.dir, "ref-other")
		writePolicy(t, in.Ref, tinyConfig(fixtureVocab+3), 7)
		_, err := Run(context.Background(), cfg, in, jobs.Spec{Out: filepath.Join(f.dir, "out-ref"), Seed: 1})
		if !errors.Is(err, ErrInput) {
			t.Fatalf("Run with a reference of another vocabulary = %v, want ErrInput", err)
		}
		t.Log(err)
	})
	// A policy or reference other than the ones the log-probs were scored with, each as
	// mempo-update would have accepted and recorded it before.
	other := func(t *testing.T, name string, fn func(t *testing.T, dir string)) string {
		dir := filepath.Join(t.TempDir(), name)
		writePolicy(t, dir, tinyConfig(fixtureVocab), 7)
		fn(t, dir)
		return dir
	}
	nanWeights := func(t *testing.T, dir string) {
		m, err := qwen2.Load(dir, qwen2.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Drop()
		if err := m.Weights()[0].Tensor.Fill_(ts.FloatScalar(math.NaN())); err != nil {
			t.Fatal(err)
		}
		if err := m.Save(dir, 0); err != nil {
			t.Fatal(err)
		}
	}
	truncate := func(t *testing.T, dir string) {
		path := filepath.Join(dir, "model.safetensors")
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(path, fi.Size()-64); err != nil {
			t.Fatal(err)
		}
	}
	reseed := func(t *testing.T, dir string) { writePolicy(t, dir, tinyConfig(fixtureVocab), 8) }
	for _, tt := range []struct {
		name string
		in   func(t *testing.T) Inputs
		want error
		flag string
	}{
		{"other reference", func(t *testing.T) Inputs { in := f.in; in.Ref = other(t, "ref", reseed); return in }, ErrReference, "--ref"},
		{"NaN reference", func(t *testing.T) Inputs { in := f.in; in.Ref = other(t, "ref", nanWeights); return in }, ErrReference, "--ref"},
		{"truncated reference", func(t *testing.T) Inputs { in := f.in; in.Ref = other(t, "ref", truncate); return in }, ErrReference, "--ref"},
		{"missing reference", func(t *testing.T) Inputs { in := f.in; in.Ref = filepath.Join(t.TempDir(), "none"); return in }, os.ErrNotExist, "ref"},
		{"other policy", func(t *testing.T) Inputs { in := f.in; in.Policy = other(t, "policy", reseed); return in }, ErrPolicy, "--policy"},
		{"reference tokenizer", func(t *testing.T) Inputs {
			in := f.in
			in.Ref = other(t, "ref", func(t *testing.T, dir string) {
				if err := os.WriteFile(filepath.Join(dir, format.TokenizerFile), []byte(`{"stand-in": "shuffled"}`+"\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			})
			return in
		}, ErrInput, format.TokenizerFile},
		{"reference without tokenizer", func(t *testing.T) Inputs {
			in := f.in
			in.Ref = other(t, "ref", func(t *testing.T, dir string) { os.Remove(filepath.Join(dir, format.TokenizerFile)) })
			return in
		}, ErrInput, "missing"},
		{"log-probs without their inputs", func(t *testing.T) Inputs {
			in := f.in
			in.Logprobs = filepath.Join(t.TempDir(), "logprobs")
			if err := os.CopyFS(in.Logprobs, os.DirFS(f.in.Logprobs)); err != nil {
				t.Fatal(err)
			}
			man, err := format.ReadManifest(in.Logprobs)
			if err != nil {
				t.Fatal(err)
			}
			man.Inputs = nil
			if err := format.WriteManifest(in.Logprobs, man); err != nil {
				t.Fatal(err)
			}
			return in
		}, ErrInput, "records no"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			in := tt.in(t)
			out := filepath.Join(t.TempDir(), "out")
			_, err := Run(context.Background(), cfg, in, jobs.Spec{Out: out, Seed: 1})
			if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.flag) {
				t.Fatalf("Run = %v, want %v mentioning %q", err, tt.want, tt.flag)
			}
			if _, serr := os.Stat(out); !errors.Is(serr, os.ErrNotExist) {
				t.Errorf("after the refused run, %s exists (%v), want nothing published", out, serr)
			}
			t.Log(err)
		})
	}
	t.Run("too many mini-batches", func(t *testing.T) {
		c := cfg
		c.MiniBatches = 1000
		_, err := Run(context.Background(), c, f.in, jobs.Spec{Out: filepath.Join(f.dir, "out-mb"), Seed: 1})
		if !errors.Is(err, ErrConfig) {
			t.Fatalf("Run with --mini-batches 1000 = %v, want ErrConfig", err)
		}
	})
}

// TestRunNaN trains a policy whose weights hold a NaN (a diverged checkpoint): the loss
// is NaN, the run must fail naming it and publish nothing, and the previous checkpoint
// at --out must stay.
func TestRunNaN(t *testing.T) {
	f := newFixture(t, randomTurns(rand.New(rand.NewPCG(7, 8)), 4))
	cfg := testConfig()
	out := filepath.Join(f.dir, "out")
	good, err := Run(context.Background(), cfg, f.in, jobs.Spec{Out: out, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}

	bad := f.in
	bad.Policy = filepath.Join(f.dir, "diverged")
	m, err := qwen2.Load(f.in.Policy, qwen2.Options{})
	if err != nil {
		t.Fatal(err)
	}
	w := m.Weights()[len(m.Weights())-1].Tensor // the final norm
	if err := w.Fill_(ts.FloatScalar(math.NaN())); err != nil {
		t.Fatal(err)
	}
	if err := m.Save(bad.Policy, 0); err != nil {
		t.Fatal(err)
	}
	m.Drop()
	for _, name := range append([]string{format.TokenizerFile}, bpe.CompanionFiles...) {
		if err := jobs.CopyFile(filepath.Join(bad.Policy, name), filepath.Join(f.in.Policy, name)); err != nil {
			t.Fatal(err)
		}
	}
	recordScoring(t, bad) // the log-probs were scored with the diverged policy
	_, err = Run(context.Background(), cfg, bad, jobs.Spec{Out: out, Seed: 1})
	if !errors.Is(err, train.ErrNonFinite) {
		t.Fatalf("Run on a NaN policy = %v, want ErrNonFinite", err)
	}
	t.Log(err)
	c, err := format.ReadCommit(out)
	if err != nil || c.CacheKey != good.Key.String() {
		t.Fatalf("after the failed run, %s holds key %v (%v), want the previous checkpoint's %s", out, c, err, good.Key.Short())
	}
}

// TestSnapshotCadence checks WithSnapshotEvery's one meaning through the update: a
// snapshot after every n-th mini-batch and after each epoch's last; n <= 0 at epoch
// ends only; the update's default every mini-batch.
func TestSnapshotCadence(t *testing.T) {
	f := newFixture(t, randomTurns(rand.New(rand.NewPCG(5, 6)), 6))
	cfg := testConfig()
	cfg.MiniBatches, cfg.PPOEpochs = 3, 2 // plan: 6 mini-batches, epoch ends after 3 and 6
	tests := []struct {
		name string
		opt  []train.Option
		want []int
	}{
		{"default: every mini-batch", nil, []int{1, 2, 3, 4, 5, 6}},
		{"every 2nd and epoch ends", []train.Option{train.WithSnapshotEvery(2)}, []int{2, 3, 4, 6}},
		{"0: epoch ends only", []train.Option{train.WithSnapshotEvery(0)}, []int{3, 6}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []int
			spec := jobs.Spec{Out: filepath.Join(f.dir, fmt.Sprintf("cadence-%d", i)), Seed: 1, Trace: func(step jobs.Step, n int) {
				if step == jobs.StepRecorded {
					got = append(got, n)
				}
			}}
			if _, err := Run(context.Background(), cfg, f.in, spec, tt.opt...); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("snapshots after mini-batches %v, want %v", got, tt.want)
			}
		})
	}
}
