package train

import (
	"bufio"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/mempo/mempo/internal/procstat"
	"github.com/mempo/mempo/model/qwen2"
	"github.com/mempo/mempo/model/torch"
	"github.com/mempo/mempo/model/torch/torchtest"
)

// memoryCase is one training step whose peak memory TestMemoryEstimate measures: a
// model of preset (truncated to layers when > 0) in dtype, and one PPO micro-batch of
// turns sequences of context + response tokens; with prompt > 0 every context starts
// with the same prompt tokens and the micro-batch runs as a tree pass (SharePrefixes).
type memoryCase struct {
	preset            string
	layers            int
	dtype             string
	turns             int
	context, response int
	checkpoint        bool
	prompt            int
}

var memoryCases = map[string]memoryCase{
	"tiny":          {preset: "tiny", dtype: "float32", turns: 8, context: 192, response: 64},
	"tiny-bf16":     {preset: "tiny", dtype: "bfloat16", turns: 8, context: 192, response: 64},
	"tiny-4k":       {preset: "tiny", dtype: "float32", turns: 1, context: 3968, response: 128},
	"tiny-4k-ckpt":  {preset: "tiny", dtype: "float32", turns: 1, context: 3968, response: 128, checkpoint: true},
	"0.5b-shape-2l": {preset: "qwen2.5-0.5b-shape", layers: 2, dtype: "float32", turns: 2, context: 192, response: 64},
	"tiny-shared":   {preset: "tiny", dtype: "float32", turns: 16, context: 64, response: 64, prompt: 128},
}

func (c memoryCase) config(t testing.TB) qwen2.Config {
	cfg, err := qwen2.Preset(c.preset, 0)
	if err != nil {
		t.Fatal(err)
	}
	if c.layers > 0 {
		cfg.NumLayers, cfg.MaxWindowLayers = c.layers, c.layers
	}
	cfg.TorchDType = c.dtype
	return cfg
}

// estimate is EstimateMemory of the case's step: of its batch as the tree pass runs
// it when the turns share a prompt.
func (c memoryCase) estimate(t testing.TB) Memory {
	cfg := c.config(t)
	pass := PPOStep{GradCheckpoint: c.checkpoint, SharePrefixes: c.prompt > 0}.Pass(c.batch(cfg.VocabSize))
	return PlanMemory(cfg, Shape{Entropy: true, GradCheckpoint: c.checkpoint}, []Pass{pass})
}

// TestStepPass: the pass shape a step reports for the memory plan is the one it runs.
// Two turns share a 4-token prompt. A PPO step scores the responses and, sharing
// prefixes, runs the prompt once as a trunk and each turn's rest as a branch; with
// GradCheckpoint it never shares. An SFT step with a context weight also scores every
// token after a turn's first, and groups whole sequences.
func TestStepPass(t *testing.T) {
	prompt := []int64{1, 2, 3, 4}
	pairs := []qwen2.Pair{
		{Context: slices.Concat(prompt, []int64{5, 6}), Response: []int64{7, 8}},
		{Context: slices.Concat(prompt, []int64{9}), Response: []int64{10}},
	}
	seqs := []*Sequence{{Context: pairs[0].Context, Response: pairs[0].Response}, {Context: pairs[1].Context, Response: pairs[1].Response}}
	// Shared: trunk [1 2 3 4], branches [5 6 7 8] and [9 10] in rows 4 wide, whose
	// queries read the 4 trunk keys before their row's.
	shared := Pass{Lengths: []int{4, 4, 2}, Keys: 8}
	for name, c := range map[string]struct {
		got, want Pass
	}{
		"ppo":                {PPOStep{}.Pass(seqs), Pass{Lengths: []int{8, 6}, Scored: 3}},
		"ppo shared":         {PPOStep{SharePrefixes: true}.Pass(seqs), Pass{Lengths: shared.Lengths, Keys: shared.Keys, Scored: 3}},
		"ppo checkpointed":   {PPOStep{SharePrefixes: true, GradCheckpoint: true}.Pass(seqs), Pass{Lengths: []int{8, 6}, Scored: 3}},
		"sft":                {NLLStep{}.Pass(pairs), Pass{Lengths: []int{8, 6}, Scored: 3}},
		"sft context":        {NLLStep{ContextWeight: 0.2}.Pass(pairs), Pass{Lengths: []int{8, 6}, Scored: 12}},
		"sft context shared": {NLLStep{ContextWeight: 0.2, SharePrefixes: true}.Pass(pairs), Pass{Lengths: shared.Lengths, Keys: shared.Keys, Scored: 12}},
	} {
		if !slices.Equal(c.got.Lengths, c.want.Lengths) || c.got.Scored != c.want.Scored || c.got.Keys != c.want.Keys {
			t.Errorf("%s: pass %+v, want %+v", name, c.got, c.want)
		}
	}
}

// batch is the case's micro-batch: random sequences (randomSequence), each after the
// shared prompt.
func (c memoryCase) batch(vocab int) []*Sequence {
	rng := rand.New(rand.NewPCG(1, 1))
	prompt := randomIDs(rng, c.prompt, vocab)
	var out []*Sequence
	for range c.turns {
		s := randomSequence(rng, c.context, c.response, vocab)
		s.Context = append(slices.Clone(prompt), s.Context...)
		out = append(out, s)
	}
	return out
}

// memoryChild names the case a child process of TestMemoryEstimate measures.
const memoryChild = "MEMPO_TRAIN_MEMORY_CASE"

// TestMemoryEstimate checks EstimateMemory against the measured peak RSS of one
// training step (model, flat AdamW with lent gradients, one PPO micro-batch with
// entropies, the optimizer step) on the CPU, each case in a fresh process: the
// estimate must be within 0.7-1.5× of the peak's growth over the RSS before the model
// was built.
func TestMemoryEstimate(t *testing.T) {
	if testing.Short() {
		t.Skip("trains a step of each case in a child process")
	}
	for _, name := range []string{"tiny", "tiny-bf16", "tiny-4k", "tiny-4k-ckpt", "0.5b-shape-2l", "tiny-shared"} {
		t.Run(name, func(t *testing.T) {
			c := memoryCases[name]
			cmd := exec.Command(os.Args[0], "-test.run=^TestMemoryChild$")
			cmd.Env = append(os.Environ(), memoryChild+"="+name)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("child: %v\n%s", err, out)
			}
			got, ok := measured(string(out))
			if !ok {
				t.Fatalf("child printed no measurement:\n%s", out)
			}
			est := c.estimate(t)
			ratio := float64(est.Total()) / got
			t.Logf("%s: measured peak growth %s, estimate %s, ratio %.2f", name, ByteSize(int64(got)), est, ratio)
			if ratio < 0.7 || ratio > 1.5 {
				t.Errorf("estimate %s is %.2f× the measured %s, want 0.7-1.5×", ByteSize(est.Total()), ratio, ByteSize(int64(got)))
			}
		})
	}
}

// measured reads the child's "memory_peak_bytes N" line.
func measured(out string) (float64, bool) {
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "memory_peak_bytes "); ok {
			v, err := strconv.ParseFloat(rest, 64)
			return v, err == nil
		}
	}
	return 0, false
}

// TestMemoryChild is TestMemoryEstimate's child; it does nothing in a normal run.
func TestMemoryChild(t *testing.T) {
	name := os.Getenv(memoryChild)
	if name == "" {
		return
	}
	c := memoryCases[name]
	torch.BoundHeap() // as the training stages run
	base, _ := procstat.KB("VmRSS")
	cfg := c.config(t)
	m, ps := initModel(t, cfg, qwen2.Options{DType: c.dtype})
	defer m.Drop()
	adam, err := NewAdamW(ps, DefaultAdamW)
	if err != nil {
		t.Fatal(err)
	}
	defer adam.Drop()
	if err := adam.LendGrads(); err != nil {
		t.Fatal(err)
	}
	batch := c.batch(cfg.VocabSize)
	var lengths []int
	for _, s := range batch {
		lengths = append(lengths, len(s.Response))
	}
	div, err := Divisor(DefaultObjective.Agg, lengths)
	if err != nil {
		t.Fatal(err)
	}
	torch.TrimHeap()
	torchtest.ResetPeakRSS(t)
	step := PPOStep{Model: m, Objective: DefaultObjective, GradCheckpoint: c.checkpoint, SharePrefixes: c.prompt > 0}
	if _, err := step.Micro(batch, div); err != nil {
		t.Fatal(err)
	}
	if _, err := adam.Step(); err != nil && !errors.Is(err, ErrNonFinite) {
		t.Fatal(err)
	}
	peak, _ := procstat.KB("VmHWM")
	fmt.Printf("memory_peak_bytes %d\n", (peak-base)<<10)
}
