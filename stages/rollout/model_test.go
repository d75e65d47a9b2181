package rollout

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/sugarme/gotch/ts"

	"github.com/mempo/mempo/agent/protocol"
	"github.com/mempo/mempo/format"
	"github.com/mempo/mempo/jobs"
	"github.com/mempo/mempo/model/bpe"
	"github.com/mempo/mempo/model/torch"
)

// modelConfig keeps the tiny random policy's rollouts small: 2 samples of the 6
// training prompts, 3 turns of at most 10 tokens.
func modelConfig(pps int) Config {
	cfg := DefaultConfig()
	cfg.N, cfg.MaxTurns, cfg.MaxNewTokens, cfg.PromptsPerShard = 2, 3, 10, pps
	return cfg
}

func runModel(t *testing.T, cfg Config, spec jobs.Spec) (*jobs.Result, error) {
	t.Helper()
	f := testFixture(t)
	if spec.Seed == 0 {
		spec.Seed = 3
	}
	return Run(context.Background(), cfg, Inputs{Prompts: f.train, Policy: f.policy, Index: f.index}, spec)
}

// TestModelRolloutsReproducible runs the tiny random policy end to end and checks that
// the output does not depend on how the work is cut: two runs, another shard size,
// --shard i/N plus a merge, and a run stopped after its first shard then resumed. Under
// the full context each trajectory carries its keys and values from turn to turn inside
// the process, which a resumed run starts without: its rows must still be the same bytes.
func TestModelRolloutsReproducible(t *testing.T) {
	if err := torch.SetNumThreads(1); err != nil {
		t.Fatal(err)
	}
	for _, c := range []protocol.ContextPolicy{protocol.Mempo, protocol.Full} {
		t.Run(string(c), func(t *testing.T) {
			testReproducible(t, func(pps int) Config {
				cfg := modelConfig(pps)
				cfg.Context = c
				return cfg
			})
		})
	}
}

func testReproducible(t *testing.T, modelConfig func(pps int) Config) {
	before := len(ts.ExistingTensors)
	root := t.TempDir()
	base, err := runModel(t, modelConfig(2), jobs.Spec{Out: filepath.Join(root, "a")})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(ts.ExistingTensors); n != before {
		t.Errorf("live tensors after a run: %d, want %d (the policy and every step's tensors dropped)", n, before)
	}
	want := readRows(t, filepath.Join(root, "a"))
	if len(base.Manifest.Outputs) != 3 || len(want) < 12 {
		t.Fatalf("base run: %d shards, %d rows; want 3 shards and at least one row per trajectory", len(base.Manifest.Outputs), len(want))
	}
	t.Logf("base run: %d rows, metrics %v", len(want), base.Manifest.Metrics)
	if modelConfig(2).Context == protocol.Full && turnRows(want, afterFirst) == 0 {
		t.Fatal("full-context base run has no row after a first turn: nothing was carried")
	}

	t.Run("second run", func(t *testing.T) {
		res, err := runModel(t, modelConfig(2), jobs.Spec{Out: filepath.Join(root, "b")})
		if err != nil {
			t.Fatal(err)
		}
		if res.Manifest.Digest() != base.Manifest.Digest() {
			t.Errorf("second run digest %s, want %s", res.Manifest.Digest(), base.Manifest.Digest())
		}
	})

	t.Run("cache hit", func(t *testing.T) {
		res, err := runModel(t, modelConfig(2), jobs.Spec{Out: filepath.Join(root, "a")})
		if err != nil || !res.Hit {
			t.Fatalf("rerun = hit %v, %v; want a cache hit", res != nil && res.Hit, err)
		}
	})

	t.Run("seed", func(t *testing.T) {
		res, err := runModel(t, modelConfig(2), jobs.Spec{Out: filepath.Join(root, "seed"), Seed: 4})
		if err != nil {
			t.Fatal(err)
		}
		if res.Manifest.Digest() == base.Manifest.Digest() {
			t.Errorf("seed 4 gave the same rollouts as seed 3")
		}
	})

	t.Run("shard size", func(t *testing.T) {
		for _, pps := range []int{1, 6} {
			dir := filepath.Join(root, fmt.Sprintf("pps%d", pps))
			res, err := runModel(t, modelConfig(pps), jobs.Spec{Out: dir})
			if err != nil {
				t.Fatal(err)
			}
			if got, want := len(res.Manifest.Outputs), 6/pps; got != want {
				t.Errorf("--prompts-per-shard %d: %d shards, want %d", pps, got, want)
			}
			// Tokens must match exactly. Sampling log-probs may differ in the last
			// bits: libtorch picks GEMM kernels by batch shape (qwen2.Generate), and
			// another shard size batches other trajectories together.
			got := readRows(t, dir)
			if diff := cmp.Diff(want, got, cmpopts.IgnoreFields(format.Rollout{}, "SamplingLogprobs")); diff != "" {
				t.Errorf("--prompts-per-shard %d: rows (-pps 2 +pps %d):\n%s", pps, pps, diff)
			}
			if d := maxLogprobDiff(want, got); d > 1e-5 {
				t.Errorf("--prompts-per-shard %d: max |Δ sampling_logprob| = %g, want <= 1e-5", pps, d)
			} else {
				t.Logf("--prompts-per-shard %d: max |Δ sampling_logprob| = %g", pps, d)
			}
		}
	})

	t.Run("parts and merge", func(t *testing.T) {
		out := filepath.Join(root, "parts")
		for i := range 2 {
			if _, err := runModel(t, modelConfig(2), jobs.Spec{Out: out, Part: jobs.Part{Index: i, Count: 2}}); err != nil {
				t.Fatal(err)
			}
		}
		res, err := runModel(t, modelConfig(2), jobs.Spec{Out: out, Merge: 2})
		if err != nil {
			t.Fatal(err)
		}
		if res.Manifest.Digest() != base.Manifest.Digest() {
			t.Errorf("--shard 0/2 + 1/2 + --merge 2: digest %s, want the unsharded %s", res.Manifest.Digest(), base.Manifest.Digest())
		}
	})

	t.Run("resume", func(t *testing.T) {
		out := filepath.Join(root, "resume")
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		f := testFixture(t)
		in := Inputs{Prompts: f.train, Policy: f.policy, Index: f.index}
		spec := jobs.Spec{Out: out, Seed: 3, Trace: func(step jobs.Step, shard int) {
			if step == jobs.StepRecorded && shard == 0 {
				cancel() // the run dies after its first shard is durable
			}
		}}
		if _, err := Run(ctx, modelConfig(2), in, spec); !errors.Is(err, context.Canceled) {
			t.Fatalf("interrupted run = %v, want context.Canceled", err)
		}
		if _, err := format.OpenDataset(out); !errors.Is(err, format.ErrNotDataset) {
			t.Fatalf("after the interruption OpenDataset = %v, want ErrNotDataset", err)
		}
		res, err := runModel(t, modelConfig(2), jobs.Spec{Out: out})
		if err != nil {
			t.Fatal(err)
		}
		if res.Resumed != 1 || res.Manifest.Digest() != base.Manifest.Digest() {
			t.Errorf("resumed run: %d shards resumed, digest %s; want 1 and %s", res.Resumed, res.Manifest.Digest(), base.Manifest.Digest())
		}
	})
	if n := len(ts.ExistingTensors); n != before {
		t.Errorf("live tensors after every run: %d, want %d", n, before)
	}
}

// carryWatch is the policy sampler with its carried keys and values counted: most is
// the most trajectories it carried into a turn, and kept the Pasts it holds after the
// turn budget's last turn (which has no next turn to use them).
type carryWatch struct {
	*model
	most, kept int
}

func (w *carryWatch) sample(ctx context.Context, reqs []request) ([]protocol.Generation, error) {
	w.most = max(w.most, len(w.pasts))
	gens, err := w.model.sample(ctx, reqs)
	for _, r := range reqs {
		if r.Turn == w.maxTurns-1 && w.pasts[slot{r.UID, r.Sample}] != nil {
			w.kept++
		}
	}
	return gens, err
}

// TestFullContextCarry rolls out the full-context policy through the stage twice: as Run
// does, each trajectory's keys and values carried from one turn to the next, and with
// every turn's context run whole. Rows must be identical but for sampling log-probs
// within 1e-5 (the reused keys and values were computed in other batch shapes), the
// carried run must have carried every running trajectory, and nothing may stay live.
func TestFullContextCarry(t *testing.T) {
	if err := torch.SetNumThreads(1); err != nil {
		t.Fatal(err)
	}
	f := testFixture(t)
	cfg := modelConfig(3)
	cfg.Context, cfg.MaxTurns = protocol.Full, 4
	in := Inputs{Prompts: f.train, Policy: f.policy, Index: f.index}
	before := torch.Live()
	root := t.TempDir()
	var watches []*carryWatch
	for _, carry := range []bool{true, false} {
		load := func(cfg Config, policy string, tok *bpe.Tokenizer) (sampler, func(), error) {
			s, release, err := loadModel(cfg, policy, tok)
			if err != nil {
				return nil, nil, err
			}
			w := &carryWatch{model: s.(*model)}
			w.carry = carry
			watches = append(watches, w)
			return w, release, nil
		}
		if _, err := run(context.Background(), cfg, in, jobs.Spec{Out: filepath.Join(root, fmt.Sprint(carry)), Seed: 3}, load); err != nil {
			t.Fatal(err)
		}
	}
	carried, whole := readRows(t, filepath.Join(root, "true")), readRows(t, filepath.Join(root, "false"))
	later := turnRows(carried, afterFirst)
	if later == 0 || watches[0].most < cfg.N*cfg.PromptsPerShard/2 || watches[1].most != 0 {
		t.Fatalf("%d rows after a first turn; carried at most %d and %d trajectories into a turn: want later turns, and carrying only in the first run", later, watches[0].most, watches[1].most)
	}
	if last := turnRows(carried, func(turn int) bool { return turn == cfg.MaxTurns-1 }); last == 0 || watches[0].kept != 0 {
		t.Errorf("%d rows of a last turn, %d Pasts kept from one: want some, and none kept", last, watches[0].kept)
	}
	if diff := cmp.Diff(whole, carried, cmpopts.IgnoreFields(format.Rollout{}, "SamplingLogprobs")); diff != "" {
		t.Errorf("rows (-whole contexts +carried):\n%s", diff)
	}
	if d := maxLogprobDiff(whole, carried); d > 1e-5 {
		t.Errorf("max |Δ sampling_logprob| = %g, want <= 1e-5", d)
	} else {
		t.Logf("%d rows, %d of later turns: max |Δ sampling_logprob| = %g", len(carried), later, d)
	}
	if n := torch.Live(); n != before {
		t.Errorf("live tensors after both runs: %d, want %d", n, before)
	}
}

// turnRows counts the rows whose turn (from 0) satisfies keep.
func turnRows(rows []format.Rollout, keep func(turn int) bool) int {
	n := 0
	for _, r := range rows {
		if keep(int(r.Turn)) {
			n++
		}
	}
	return n
}

// afterFirst is a turn after the first.
func afterFirst(turn int) bool { return turn > 0 }

func maxLogprobDiff(a, b []format.Rollout) float64 {
	d := 0.0
	for i := range min(len(a), len(b)) {
		for j := range min(len(a[i].SamplingLogprobs), len(b[i].SamplingLogprobs)) {
			d = max(d, math.Abs(float64(a[i].SamplingLogprobs[j]-b[i].SamplingLogprobs[j])))
		}
	}
	return d
}

// BenchmarkRollout measures generation throughput of the tiny preset for one turn of a
// batch of 16 fresh episodes (one prompt's GRPO group), in generated tokens per second.
func BenchmarkRollout(b *testing.B) {
	f := testFixture(b)
	cfg := DefaultConfig()
	cfg.MaxNewTokens = 64
	cfg.Protocol = protocol.Default()
	s, release, err := loadModel(cfg, f.policy, f.tok)
	if err != nil {
		b.Fatal(err)
	}
	defer release()
	q := f.world.Train[0]
	var tokens int64
	var elapsed time.Duration
	seed := int64(0)
	for b.Loop() {
		seed++
		eps := make([]*protocol.Episode, 16)
		slots := map[*protocol.Episode]slot{}
		for i := range eps {
			if eps[i], err = protocol.NewEpisode(cfg.Protocol, nil, f.tok, cfg.Episode(), q.Question, q.K); err != nil {
				b.Fatal(err)
			}
			slots[eps[i]] = slot{uid: q.UID, sample: i}
		}
		gen := &episodes{s: s, seed: seed, slots: slots, tokens: func(n int64) { tokens += n }}
		start := time.Now()
		if _, err := protocol.Advance(context.Background(), eps, gen, noSearch{}); err != nil {
			b.Fatal(err)
		}
		elapsed += time.Since(start)
	}
	b.ReportMetric(float64(tokens)/elapsed.Seconds(), "tokens/s")
}

// noSearch answers every query with no documents: the benchmark times generation only.
type noSearch struct{}

func (noSearch) Retrieve(_ context.Context, queries []string) ([][]protocol.Doc, error) {
	return make([][]protocol.Doc, len(queries)), nil
}
