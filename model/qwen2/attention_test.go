package qwen2

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/mempo/mempo/model/sample"
	"github.com/mempo/mempo/model/torch"
	"github.com/mempo/mempo/model/torch/torchtest"
)

// withAttention runs f with m's multi-token passes attending as Options.Attention name
// says, and restores m's setting after.
func withAttention(t *testing.T, m *Model, name string, f func()) {
	t.Helper()
	from, err := attentionFuseFrom(name)
	if err != nil {
		t.Fatal(err)
	}
	defer func(old int64) { m.fuseFrom = old }(m.fuseFrom)
	m.fuseFrom = from
	f()
}

// TestFusedAttentionMatches runs the scoring passes with gradients with every
// multi-token pass attending materialised (eager) and fused (sdpa), and requires the
// same log-probs, entropies and weight gradients to float32 rounding: the flat pass
// (packed rows, padding) and the tree pass (branches reading their trunk's keys
// before their own), on an update's pairs and on SFT's. A mask the fused kernel read
// differently or a key head repeated for the wrong query heads would fail here.
func TestFusedAttentionMatches(t *testing.T) {
	runtime.LockOSThread() // libtorch's grad mode is per OS thread
	defer runtime.UnlockOSThread()
	m := newTrainableModel(t, testConfig(), Options{})
	defer torch.SetGrad(torch.SetGrad(true))
	cases := []struct {
		name    string
		pairs   []Pair
		trunked bool
	}{
		{"update", treeCases(rand.New(rand.NewPCG(3, 4)), 97), false},
		{"sft", sftCases(rand.New(rand.NewPCG(3, 4)), 97), true},
	}
	for _, c := range cases {
		cfg := ScoreConfig{Entropy: true, Chunk: 7, Temperature: 0.7, ShareScored: c.trunked}
		for _, tree := range []bool{false, true} {
			score := m.LogProbTensor
			if tree {
				score = m.TreeLogProbTensor
			}
			t.Run(fmt.Sprintf("%s/tree=%v", c.name, tree), func(t *testing.T) {
				var eager, fused scored
				withAttention(t, m, "eager", func() { eager = scoreGrads(t, m, score, c.pairs, cfg) })
				withAttention(t, m, "sdpa", func() { fused = scoreGrads(t, m, score, c.pairs, cfg) })
				fused.check(t, eager, 1e-5)
			})
		}
	}
}

// TestFusedAttentionGenerate decodes two turns, the second prefilled over the first's
// carried cache (queries reading cached keys before their own), with multi-token passes
// materialised and fused: the same greedy tokens, and sampling log-probs within 1e-5.
func TestFusedAttentionGenerate(t *testing.T) {
	m := newTestModel(t, testConfig(), Options{})
	cfg := sample.Config{MaxNewTokens: 8}
	var prompts [][]int64
	for _, r := range testRequests(4) {
		prompts = append(prompts, r.Prompt)
	}
	run := func(name string) (out []Completion) {
		withAttention(t, m, name, func() {
			_, carried := secondTurns(t, m, rand.New(rand.NewPCG(7, 8)), prompts, 5, cfg)
			out = append(generate(t, m, carried, cfg), generate(t, m, []Request{{Prompt: slices.Concat(prompts...)}}, cfg)...)
		})
		return out
	}
	eager, fused := run("eager"), run("sdpa")
	for i := range eager {
		if diff := cmp.Diff(eager[i].Tokens, fused[i].Tokens); diff != "" {
			t.Errorf("completion %d tokens (-eager +sdpa):\n%s", i, diff)
		}
		if d := torchtest.MaxAbsDiff(eager[i].LogProbs, fused[i].LogProbs); d > 1e-5 {
			t.Errorf("completion %d: max |Δlogprob| = %g, want <= 1e-5", i, d)
		}
	}
}

// TestFusedAttentionBFloat16 scores with gradients in bfloat16 both ways: log-probs
// and entropies within bfloat16's rounding, and finite gradients from the fused
// kernel's backward pass.
func TestFusedAttentionBFloat16(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	m := newTrainableModel(t, testConfig(), Options{DType: "bfloat16"})
	defer torch.SetGrad(torch.SetGrad(true))
	pairs := treeCases(rand.New(rand.NewPCG(5, 6)), 97)
	cfg := ScoreConfig{Entropy: true}
	var eager, fused scored
	withAttention(t, m, "eager", func() { eager = scoreGrads(t, m, m.LogProbTensor, pairs, cfg) })
	withAttention(t, m, "sdpa", func() { fused = scoreGrads(t, m, m.LogProbTensor, pairs, cfg) })
	if d := torchtest.MaxAbsDiff(fused.lp, eager.lp); d > 0.05 {
		t.Errorf("bfloat16 log-probs differ by %g, want <= 0.05", d)
	}
	if d := torchtest.MaxAbsDiff(fused.ent, eager.ent); d > 0.05 {
		t.Errorf("bfloat16 entropies differ by %g, want <= 0.05", d)
	}
	for k, g := range fused.grads {
		for i, v := range g {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				t.Fatalf("%s: gradient %d is %g", k, i, v)
			}
		}
	}
}

// TestAttentionChoice: which passes each Options.Attention value fuses, and the values
// New refuses.
func TestAttentionChoice(t *testing.T) {
	shapes := []struct{ t, keys int64 }{{1, 8192}, {2, 2}, {16, 8192}, {1024, 1024}, {2048, 2048}, {1000, 9000}}
	want := map[string][]bool{
		"eager": {false, false, false, false, false, false},
		"sdpa":  {false, true, true, true, true, true},
		"auto":  {false, false, false, false, true, true},
		"":      {false, false, false, false, true, true},
	}
	for name, w := range want {
		m := newTestModel(t, testConfig(), Options{Attention: name})
		for i, s := range shapes {
			if got := m.fuses(s.t, s.keys); got != w[i] {
				t.Errorf("attention %q: %d tokens over %d keys fused = %v, want %v", name, s.t, s.keys, got, w[i])
			}
		}
	}
	for _, bad := range []string{"flash", "SDPA", "math"} {
		if _, err := New(testConfig(), Options{Attention: bad}); err == nil || !strings.Contains(err.Error(), "want auto, eager or sdpa") {
			t.Errorf("attention %q: err = %v, want one naming the choices", bad, err)
		}
	}
}

// envAttentionChild names the attention a TestFusedAttentionMemory child measures.
const envAttentionChild = "MEMPO_TEST_ATTENTION_CHILD"

// TestFusedAttentionMemory measures the peak tensor memory of one forward pass of the
// tiny preset over a 2048-token row (torch.HeapPeak, in a child process each, since
// the measurement needs the stages' allocator), materialised and fused: fused must
// hold under half, which it can only if libtorch ran a kernel that never materialises
// the scores (4 heads × 2048² float32, 64 MiB a layer, and as much again for the
// probabilities) rather than falling back to its math path; auto must fuse there too.
func TestFusedAttentionMemory(t *testing.T) {
	if name, ok := os.LookupEnv(envAttentionChild); ok {
		fmt.Printf("peak_bytes %d\n", attentionPeak(t, name))
		return
	}
	if v := strings.Split(torch.Version(), "."); len(v) > 1 && v[0] == "2" {
		if minor, _ := strconv.Atoi(v[1]); minor < 3 {
			t.Skipf("libtorch %s has no fused CPU attention with a mask (2.3 and later)", torch.Version())
		}
	}
	peak := map[string]int64{}
	for _, name := range Attentions {
		cmd := exec.Command(os.Args[0], "-test.run=^TestFusedAttentionMemory$")
		cmd.Env = append(os.Environ(), envAttentionChild+"="+name)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("child for %s: %v\n%s", name, err, out)
		}
		for _, line := range strings.Split(string(out), "\n") {
			if v, ok := strings.CutPrefix(line, "peak_bytes "); ok {
				peak[name], _ = strconv.ParseInt(v, 10, 64)
			}
		}
	}
	t.Logf("peak tensor MiB: eager %.1f, sdpa %.1f, auto %.1f", mib(peak["eager"]), mib(peak["sdpa"]), mib(peak["auto"]))
	if peak["eager"] < 64<<20 {
		t.Fatalf("eager attention peaked at %.1f MiB, below one layer's scores: the measurement is broken", mib(peak["eager"]))
	}
	for _, name := range []string{"sdpa", "auto"} {
		if peak[name] <= 0 || peak[name] > peak["eager"]/2 {
			t.Errorf("%s attention peaked at %.1f MiB, want under half of eager's %.1f", name, mib(peak[name]), mib(peak["eager"]))
		}
	}
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }

// attentionPeak is the peak bytes of BoundHeap's cache over one forward pass (no
// logits) of the tiny preset over 2048 random tokens, beyond what was live before it.
func attentionPeak(t *testing.T, name string) int64 {
	torch.BoundHeap()
	c, err := Preset("tiny", 0)
	if err != nil {
		t.Fatal(err)
	}
	m := newTestModel(t, c, Options{Attention: name})
	b := NewBatch([][]int64{torchtest.RandomTokens(rand.New(rand.NewPCG(1, 1)), 2048, c.VocabSize)}, []int{0}, nil, 0)
	var peak int64
	torch.DoNoGrad(func() {
		ids, pos, bias := m.inputs(b)
		defer torch.Free(ids, pos, bias)
		torch.TrimHeap()
		base, _ := torch.HeapStats()
		m.hidden(ids, pos, bias, nil, nil).Free()
		peak = torch.HeapPeak() - base
	})
	return peak
}
