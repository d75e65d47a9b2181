package sft

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/sugarme/gotch/ts"

	"github.com/mempo/mempo/agent/protocol"
	"github.com/mempo/mempo/agent/task"
	"github.com/mempo/mempo/format"
	"github.com/mempo/mempo/format/formattest"
	"github.com/mempo/mempo/jobs"
	"github.com/mempo/mempo/jobs/jobstest"
	"github.com/mempo/mempo/model/bpe"
	"github.com/mempo/mempo/model/qwen2"
	"github.com/mempo/mempo/model/torch"
	"github.com/mempo/mempo/stages/gentask"
	"github.com/mempo/mempo/stages/index"
	"github.com/mempo/mempo/train"
)

// fixture is a small task directory with its index and an untrained policy whose
// tokenizer is trained on the task's corpus and prompt.
type fixture struct {
	dir string
	in  Inputs
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	dir := t.TempDir()
	tc := task.Config{Seed: 3, People: 24, Cities: 8, Companies: 8, Countries: 3, TwinRate: 0.3, TwoHopRate: 0.3,
		TrainK: 2, Train: 24, TestK: []int{2}, Test: 4}
	taskDir := filepath.Join(dir, "task")
	if _, err := gentask.Run(context.Background(), tc, jobs.Spec{Out: taskDir}); err != nil {
		t.Fatal(err)
	}
	idx := filepath.Join(dir, "index")
	if _, err := index.Run(context.Background(), index.Config{Corpus: filepath.Join(taskDir, task.CorpusFile)}, jobs.Spec{Out: idx}); err != nil {
		t.Fatal(err)
	}
	w, err := task.Generate(tc)
	if err != nil {
		t.Fatal(err)
	}
	texts := []string{protocol.Default().Prompt("x", 2)}
	for _, d := range w.Docs() {
		texts = append(texts, d.Contents)
	}
	tok, err := bpe.Train(slices.Values(texts), bpe.TrainConfig{VocabSize: 700})
	if err != nil {
		t.Fatal(err)
	}
	policy := filepath.Join(dir, "policy")
	cfg, err := qwen2.Preset("tiny", tok.VocabSize())
	if err != nil {
		t.Fatal(err)
	}
	cfg.HiddenSize, cfg.IntermediateSize, cfg.NumLayers, cfg.NumHeads, cfg.NumKVHeads = 32, 64, 1, 4, 2
	cfg.MaxPositions = 2048
	m, err := qwen2.New(cfg, qwen2.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Drop()
	if err := m.Init(5); err != nil {
		t.Fatal(err)
	}
	if err := m.Save(policy, 0); err != nil {
		t.Fatal(err)
	}
	if err := tok.Save(filepath.Join(policy, format.TokenizerFile)); err != nil {
		t.Fatal(err)
	}
	return &fixture{dir: dir, in: Inputs{Task: taskDir, Index: idx, Policy: policy}}
}

func testConfig() Config {
	c := DefaultConfig()
	c.Questions, c.MaxTurns, c.Epochs, c.HeldOut = 12, 6, 4, 0.25
	c.AdamW.LR, c.AdamW.WarmupSteps, c.Schedule = 1e-2, 2, Linear
	c.BatchTokens = 2048
	return c
}

// TestRun clones the oracle on a small task: the held-out loss must fall, the
// checkpoint must load and hold the oracle's trajectories, and a rerun must be a cache
// hit.
func TestRun(t *testing.T) {
	base := len(ts.ExistingTensors)
	f := newFixture(t)
	out := filepath.Join(f.dir, "sft")
	res, err := Run(context.Background(), testConfig(), f.in, jobs.Spec{Out: out, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	before, after := res.State.Metrics["heldout_loss_before"], res.State.Metrics["heldout_loss_after"]
	t.Logf("held-out NLL %.4f → %.4f over %v turns; %v steps", before, after, res.State.Metrics["heldout_turns"], res.State.Step)
	if !(after < 0.8*before) {
		t.Errorf("held-out loss %.4f → %.4f, want it to fall by at least 20%%", before, after)
	}
	if res.State.Stage != Stage || res.State.Step < 4 {
		t.Errorf("trainer state stage %q step %d, want sft and several steps", res.State.Stage, res.State.Step)
	}
	m, err := qwen2.Load(out, qwen2.Options{})
	if err != nil {
		t.Fatal(err)
	}
	m.Drop()
	if _, err := bpe.Load(filepath.Join(out, format.TokenizerFile)); err != nil {
		t.Error(err)
	}
	fh, err := os.Open(filepath.Join(out, OracleFile))
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(fh)
	sc.Buffer(nil, 1<<20)
	lines := 0
	for sc.Scan() {
		lines++
	}
	fh.Close()
	if lines != 12 {
		t.Errorf("%s has %d trajectories, want 12", OracleFile, lines)
	}
	if c, err := format.ReadCommit(out); err != nil || c.Stage != Stage {
		t.Errorf("ReadCommit = %+v, %v; want an sft commit record", c, err)
	}
	jobstest.CheckModes(t, out)
	again, err := Run(context.Background(), testConfig(), f.in, jobs.Spec{Out: out, Seed: 1})
	if err != nil || !again.Hit {
		t.Errorf("second Run = %+v, %v; want a cache hit", again, err)
	}
	if got := len(ts.ExistingTensors); got != base {
		t.Errorf("live tensors = %d, want %d", got, base)
	}
}

// TestProcs trains with two processes: the checkpoint is keyed apart from one
// process's and its weights and losses equal that run's to float rounding.
func TestProcs(t *testing.T) {
	f := newFixture(t)
	run := func(procs int) (*train.Result, []float64) {
		t.Helper()
		c := testConfig()
		c.Procs = procs
		out := filepath.Join(f.dir, fmt.Sprint("procs", procs))
		res, err := Run(context.Background(), c, f.in, jobs.Spec{Out: out, Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		m, err := qwen2.Load(out, qwen2.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Drop()
		var w []float64
		for _, p := range m.Weights() {
			w = append(w, torch.Values(p.Tensor)...)
		}
		return res, w
	}
	one, want := run(1)
	two, got := run(2)
	if one.Key == two.Key {
		t.Errorf("one and two processes share the key %s", one.Key.Short())
	}
	var num, den float64
	for i := range want {
		num += (got[i] - want[i]) * (got[i] - want[i])
		den += want[i] * want[i]
	}
	if rel := math.Sqrt(num / den); !(rel < 1e-4) {
		t.Errorf("weights trained by two processes are %.2g (relative L2) off one process's", rel)
	}
	for _, k := range []string{"heldout_loss_after", "train_loss_first", "train_loss_last"} {
		if g, w := two.State.Metrics[k], one.State.Metrics[k]; math.Abs(g-w) > 1e-4*w {
			t.Errorf("%s = %v with two processes, %v with one", k, g, w)
		}
	}
}

func TestRunRejects(t *testing.T) {
	f := newFixture(t)
	t.Run("prompts of another task", func(t *testing.T) {
		other := task.Config{Seed: 99, People: 10, Cities: 4, Companies: 4, Countries: 2, TrainK: 2, Train: 3, TestK: []int{2}, Test: 1}
		dir := filepath.Join(f.dir, "other")
		if _, err := gentask.Run(context.Background(), other, jobs.Spec{Out: dir}); err != nil {
			t.Fatal(err)
		}
		in := f.in
		in.Prompts = filepath.Join(dir, task.TrainDir)
		_, err := Run(context.Background(), testConfig(), in, jobs.Spec{Out: filepath.Join(f.dir, "x"), Seed: 1})
		if !errors.Is(err, ErrInput) {
			t.Fatalf("Run with prompts of another world = %v, want ErrInput", err)
		}
		t.Log(err)
	})
	t.Run("context too long", func(t *testing.T) {
		in := f.in
		in.Policy = filepath.Join(f.dir, "short")
		m, err := qwen2.Load(f.in.Policy, qwen2.Options{})
		if err != nil {
			t.Fatal(err)
		}
		m.Config.MaxPositions = 64
		if err := m.Save(in.Policy, 0); err != nil {
			t.Fatal(err)
		}
		m.Drop()
		if err := jobs.CopyFile(filepath.Join(in.Policy, format.TokenizerFile), filepath.Join(f.in.Policy, format.TokenizerFile)); err != nil {
			t.Fatal(err)
		}
		_, err = Run(context.Background(), testConfig(), in, jobs.Spec{Out: filepath.Join(f.dir, "y"), Seed: 1})
		if !errors.Is(err, ErrInput) {
			t.Fatalf("Run with a 64-token policy = %v, want ErrInput", err)
		}
		t.Log(err)
	})
}

// TestRunRollouts trains on a rollouts dataset that holds exactly the turns the oracle's
// replay gives (one sample per question, in the task's order): the same trajectories,
// turns and held-out split as SFT on the task, so the same weights bit for bit; and
// --task with --rollouts, or neither, is refused.
func TestRunRollouts(t *testing.T) {
	f := newFixture(t)
	cfg := testConfig()
	r := planned(t, cfg, f.in)
	var rows []format.Rollout
	for _, e := range r.examples {
		resp := int32s(e.Response)
		rows = append(rows, format.Rollout{UID: e.UID, Turn: int32(e.Turn), PromptIDs: int32s(e.Context), ResponseIDs: resp,
			SamplingLogprobs: make([]float32, len(resp)), Action: "search", Finish: "stop"})
	}
	rolls := filepath.Join(f.dir, "rollouts")
	if _, err := formattest.WriteDataset(rolls, "test", [][]format.Rollout{rows}); err != nil {
		t.Fatal(err)
	}
	fromTask, err := Run(context.Background(), cfg, f.in, jobs.Spec{Out: filepath.Join(f.dir, "sft-task"), Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	in := Inputs{Rollouts: rolls, Policy: f.in.Policy}
	fromRolls, err := Run(context.Background(), cfg, in, jobs.Spec{Out: filepath.Join(f.dir, "sft-rollouts"), Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"trajectories", "turns", "heldout_turns", "heldout_loss_before", "heldout_loss_after", "train_loss_last"} {
		if a, b := fromRolls.State.Metrics[k], fromTask.State.Metrics[k]; a != b {
			t.Errorf("%s: %v on rollouts, %v on the task", k, a, b)
		}
	}
	for _, name := range []string{"model.safetensors"} {
		a, _ := os.ReadFile(filepath.Join(f.dir, "sft-task", name))
		b, _ := os.ReadFile(filepath.Join(f.dir, "sft-rollouts", name))
		if len(a) == 0 || !bytes.Equal(a, b) {
			t.Errorf("%s differs between SFT on the task and on its replayed turns", name)
		}
	}
	if _, err := os.Stat(filepath.Join(f.dir, "sft-rollouts", OracleFile)); !os.IsNotExist(err) {
		t.Errorf("SFT on rollouts wrote %s (%v)", OracleFile, err)
	}
	for _, bad := range []Inputs{{Task: f.in.Task, Index: f.in.Index, Rollouts: rolls, Policy: f.in.Policy}, {Policy: f.in.Policy}} {
		if _, err := Run(context.Background(), cfg, bad, jobs.Spec{Out: filepath.Join(t.TempDir(), "x"), Seed: 1}); !errors.Is(err, ErrConfig) {
			t.Errorf("Run(%+v) = %v, want ErrConfig", bad, err)
		}
	}
}

func int32s(ids []int64) []int32 {
	out := make([]int32, len(ids))
	for i, id := range ids {
		out[i] = int32(id)
	}
	return out
}
