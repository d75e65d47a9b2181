package logprob

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

// rssChild, when set, makes the test binary score that many sequences and print its
// peak RSS: each size runs in a fresh process, since the high-water mark never falls.
const rssChild = "MEMPO_LOGPROB_RSS_SEQUENCES"

// BenchmarkPeakRSS reports the peak RSS of the log-prob stage scoring 1k and 10k
// sequences (64 tokens each, 250 per shard, old and ref passes). DESIGN.md §10: peak
// memory stays bounded as the dataset grows, so the ratio should be close to 1.
func BenchmarkPeakRSS(b *testing.B) { torchtest.ReportPeakRSS(b, "TestPeakRSSChild", rssChild) }

// TestPeakRSSChild is BenchmarkPeakRSS's child process; it does nothing in a normal run.
func TestPeakRSSChild(t *testing.T) {
	n, ok := torchtest.ChildSize(rssChild)
	if !ok {
		return
	}
	dir := t.TempDir()
	tok := newTokenizer(t)
	m := newModel(t, tok, 1, nil)
	digest := save(t, m, tok, filepath.Join(dir, "policy"))
	m.Drop()
	rng := rand.New(rand.NewPCG(3, 3))
	ids := func(k int) []int32 {
		out := make([]int32, k)
		for i := range out {
			out[i] = int32(16 + rng.IntN(tok.VocabSize()-16))
		}
		return out
	}
	const perShard = 250
	var shards [][]format.Rollout
	for s := 0; s*perShard < n; s++ {
		var rows []format.Rollout
		for i := range min(perShard, n-s*perShard) {
			rows = append(rows, format.Rollout{UID: fmt.Sprintf("q%06d", s*perShard+i), PromptIDs: ids(40),
				ResponseIDs: ids(24), PolicyDigest: digest})
		}
		shards = append(shards, rows)
	}
	rolls := filepath.Join(dir, "rollouts")
	if _, err := formattest.WriteDataset(rolls, "bench", shards); err != nil {
		t.Fatal(err)
	}
	shards = nil
	cfg := DefaultConfig()
	cfg.MemoryPass = false
	in := Inputs{Rollouts: rolls, Policy: filepath.Join(dir, "policy"), Ref: filepath.Join(dir, "policy")}
	torchtest.ResetPeakRSS(t)
	_, err := Run(context.Background(), cfg, in, jobs.Spec{Out: filepath.Join(dir, "out")})
	if err != nil {
		t.Fatal(err)
	}
	torchtest.PrintPeakRSS(t)
}
