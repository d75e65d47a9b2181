package serve

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/mempo/mempo/model/engine"
	"github.com/mempo/mempo/model/qwen2"
	"github.com/mempo/mempo/model/sample"
)

// Workload of BenchmarkServeConcurrentClients: benchClients clients, each sending
// benchTurns requests one after another (a rollout worker's turns), prompts of 32
// to 159 random tokens (seed 1), sampled at temperature 1, 64 new tokens each.
const (
	benchClients = 8
	benchTurns   = 4
	benchTokens  = 64
)

// benchModel is the tiny preset with random weights (seed 7) on the CPU in float32.
func benchModel(b *testing.B) *qwen2.Model {
	c, err := qwen2.Preset("tiny", 0)
	if err != nil {
		b.Fatal(err)
	}
	m, err := qwen2.New(c, qwen2.Options{})
	if err != nil {
		b.Fatal(err)
	}
	if err := m.Init(7); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(m.Drop)
	return m
}

// benchPrompts returns prompts[client][turn].
func benchPrompts(vocab int) [][][]int64 {
	rng := rand.New(rand.NewPCG(1, 1))
	out := make([][][]int64, benchClients)
	for c := range out {
		for range benchTurns {
			p := make([]int64, 32+rng.IntN(128))
			for i := range p {
				p[i] = rng.Int64N(int64(vocab))
			}
			out[c] = append(out[c], p)
		}
	}
	return out
}

// BenchmarkServeConcurrentClients measures decode throughput, generated tokens per
// second, of the benchmark workload (see benchClients) on the tiny preset:
//
//   - in-process: qwen2.Generate of all clients' requests of one turn in one batch,
//     turn after turn: the in-process engine's batched generation;
//   - serve/max-batch=N: the clients as concurrent HTTP clients of one server whose
//     engine decodes up to N requests together (1: one after another), joining and
//     leaving between steps.
//
// Figures only; the README's serve section has a measured table.
func BenchmarkServeConcurrentClients(b *testing.B) {
	m := benchModel(b)
	prompts := benchPrompts(m.Config.VocabSize)
	cfg := sample.Config{Temperature: 1, MaxNewTokens: benchTokens}
	report := func(b *testing.B, tokens int, elapsed time.Duration) {
		b.ReportMetric(float64(tokens)/elapsed.Seconds(), "tok/s")
		b.ReportMetric(0, "ns/op") // one iteration is seconds: the rate is the figure
	}
	// An untimed warm-up: libtorch's first calls allocate its pools.
	warm := make([]qwen2.Request, benchClients)
	for c := range warm {
		warm[c] = qwen2.Request{Prompt: prompts[c][0]}
	}
	if _, err := m.Generate(warm, sample.Config{MaxNewTokens: 4}); err != nil {
		b.Fatal(err)
	}
	b.Run("in-process", func(b *testing.B) {
		tokens, elapsed := 0, time.Duration(0)
		for b.Loop() {
			start := time.Now()
			for turn := range benchTurns {
				reqs := make([]qwen2.Request, benchClients)
				for c := range reqs {
					reqs[c] = qwen2.Request{Prompt: prompts[c][turn], Seed: uint64(c*benchTurns + turn)}
				}
				out, err := m.Generate(reqs, cfg)
				if err != nil {
					b.Fatal(err)
				}
				for _, o := range out {
					tokens += len(o.Tokens)
				}
			}
			elapsed += time.Since(start)
		}
		report(b, tokens, elapsed)
	})
	for _, rows := range []int{benchClients, 1} {
		b.Run(fmt.Sprintf("serve/max-batch=%d", rows), func(b *testing.B) {
			url := benchServer(b, m, rows)
			tokens, elapsed := 0, time.Duration(0)
			for b.Loop() {
				start := time.Now()
				counts := make([]int, benchClients)
				var wg sync.WaitGroup
				for c := range benchClients {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for turn := range benchTurns {
							n, err := complete(url, prompts[c][turn], uint64(c*benchTurns+turn))
							if err != nil {
								b.Error(err)
								return
							}
							counts[c] += n
						}
					}()
				}
				wg.Wait()
				elapsed += time.Since(start)
				for _, n := range counts {
					tokens += n
				}
			}
			report(b, tokens, elapsed)
		})
	}
}

// benchServer serves m with an engine of rows rows on loopback and returns its URL.
func benchServer(b *testing.B, m *qwen2.Model, rows int) string {
	eng, err := engine.New(m, engine.Config{MaxRows: rows, TokenBudget: 1 << 19})
	if err != nil {
		b.Fatal(err)
	}
	s, err := New(Model{Name: "tiny", Engine: eng, Tok: bytesTok{}, MaxPositions: m.Config.MaxPositions, VocabSize: m.Config.VocabSize}, DefaultConfig(), nil)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	ts := httptest.NewServer(s.Handler())
	b.Cleanup(func() { ts.Close(); cancel(); <-done; eng.Close() })
	return ts.URL
}

// complete sends one completion request of the benchmark workload and returns its
// number of generated tokens.
func complete(url string, prompt []int64, seed uint64) (int, error) {
	body, _ := json.Marshal(map[string]any{"prompt": prompt, "max_tokens": benchTokens, "temperature": 1,
		"seed": int64(seed), "logprobs": 0})
	resp, err := http.Post(url+"/v1/completions", "application/json", bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var out CompletionResponse
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("completion: status %d, %v", resp.StatusCode, err)
	}
	return out.Usage.CompletionTokens, nil
}
