package update

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/mempo/mempo/format"
	"github.com/mempo/mempo/format/formattest"
	"github.com/mempo/mempo/jobs"
	"github.com/mempo/mempo/model/torch/torchtest"
)

// rssChild, when set, makes the test binary train on that many rollout rows and print
// its peak RSS (see torchtest.PeakRSSSizes).
const rssChild = "MEMPO_UPDATE_RSS_ROWS"

// BenchmarkPeakRSS reports the peak RSS of the update stage training on 1k and 10k
// rollout rows (40 context and 24 response tokens each, 250 rows per shard, the
// default four mini-batches and micro-token budget of 8192, KL on). DESIGN.md §10: the
// micro-batch bounds the working set, not the dataset, so the ratio should be close
// to 1.
func BenchmarkPeakRSS(b *testing.B) { torchtest.ReportPeakRSS(b, "TestPeakRSSChild", rssChild) }

// TestPeakRSSChild is BenchmarkPeakRSS's child process; it does nothing in a normal run.
func TestPeakRSSChild(t *testing.T) {
	n, ok := torchtest.ChildSize(rssChild)
	if !ok {
		return
	}
	dir := t.TempDir()
	in := Inputs{
		Policy: filepath.Join(dir, "policy"), Ref: filepath.Join(dir, "ref"),
		Rollouts: filepath.Join(dir, "rollouts"), Logprobs: filepath.Join(dir, "logprobs"), Advantages: filepath.Join(dir, "advantages"),
	}
	cfg := tinyConfig(fixtureVocab)
	cfg.MaxPositions = 128
	writePolicy(t, in.Policy, cfg, 7)
	writePolicy(t, in.Ref, cfg, 7)
	rng := rand.New(rand.NewPCG(5, 5))
	ids := func(k int) []int32 {
		out := make([]int32, k)
		for i := range out {
			out[i] = int32(rng.IntN(fixtureVocab))
		}
		return out
	}
	values := func(k int, mean float64) []float32 {
		out := make([]float32, k)
		for i := range out {
			out[i] = float32(mean - rng.ExpFloat64())
		}
		return out
	}
	const perShard = 250
	var rolls [][]format.Rollout
	var lps [][]format.Logprob
	var advs [][]format.Advantage
	for s := 0; s*perShard < n; s++ {
		var r []format.Rollout
		var l []format.Logprob
		var a []format.Advantage
		for i := range min(perShard, n-s*perShard) {
			uid := fmt.Sprintf("q%06d", s*perShard+i)
			r = append(r, format.Rollout{UID: uid, PromptIDs: ids(40), ResponseIDs: ids(24)})
			l = append(l, format.Logprob{UID: uid, OldLogprobs: values(24, 0), RefLogprobs: values(24, 0)})
			a = append(a, format.Advantage{UID: uid, Advantages: values(24, 1)})
		}
		rolls, lps, advs = append(rolls, r), append(lps, l), append(advs, a)
	}
	for _, err := range []error{
		write(in.Rollouts, rolls), write(in.Logprobs, lps), write(in.Advantages, advs),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	recordScoring(t, in)
	rolls, lps, advs = nil, nil, nil
	torchtest.ResetPeakRSS(t)
	_, err := Run(context.Background(), DefaultConfig(), in, jobs.Spec{Out: filepath.Join(dir, "out")})
	if err != nil {
		t.Fatal(err)
	}
	torchtest.PrintPeakRSS(t)
}

func write[T format.Row](dir string, shards [][]T) error {
	_, err := formattest.WriteDataset(dir, "bench", shards)
	return err
}
