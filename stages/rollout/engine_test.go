package rollout

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/mempo/mempo/agent/protocol"
	"github.com/mempo/mempo/format"
	"github.com/mempo/mempo/jobs"
	"github.com/mempo/mempo/model/engine"
	"github.com/mempo/mempo/model/qwen2"
	"github.com/mempo/mempo/model/serve"
	"github.com/mempo/mempo/model/torch"
)

// servePolicy starts `mempo serve-policy`'s server over the fixture's policy on a
// loopback listener, its batch bounded by ecfg, and returns its URL and its engine;
// stop shuts the server down and closes the model (at cleanup too).
func servePolicy(t testing.TB, cfg serve.Config, ecfg engine.Config) (url string, eng *engine.Engine, stop func()) {
	t.Helper()
	f := testFixture(t)
	m, closeModel, err := serve.Open(serve.Policy{Dir: f.policy, Name: "tiny", Options: qwen2.Options{Device: "cpu"}, Engine: ecfg}, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := serve.New(m, cfg, nil)
	if err != nil {
		closeModel()
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { srv.Run(ctx); close(done) }()
	ts := httptest.NewServer(srv.Handler())
	var once sync.Once
	stop = func() { once.Do(func() { ts.Close(); cancel(); <-done; closeModel() }) }
	t.Cleanup(stop)
	return ts.URL, m.Engine.(*engine.Engine), stop
}

func serverConfig(cfg Config, url string) Config {
	cfg.Engine, cfg.EngineURL, cfg.EngineModel, cfg.EngineConcurrency = EngineServer, url, "tiny", 8
	return cfg
}

// TestServerEngineMatchesLocal rolls out the tiny policy in this process and
// through serve-policy on loopback. With one sequence decoded at a time on both
// sides every row is identical, log-probs to the bit; with the server batching
// continuously (requests joining and leaving its running batch between steps),
// tokens are identical and log-probs agree to the last bits libtorch's
// batch-shape kernel choice may change (see qwen2.Generate).
func TestServerEngineMatchesLocal(t *testing.T) {
	if err := torch.SetNumThreads(1); err != nil {
		t.Fatal(err)
	}
	f := testFixture(t)
	in := Inputs{Prompts: f.train, Policy: f.policy, Index: f.index, Engine: DefaultEngineClient()}
	one, _, _ := servePolicy(t, serve.DefaultConfig(), engine.Config{MaxRows: 1, TokenBudget: 1 << 20})
	many, _, _ := servePolicy(t, serve.DefaultConfig(), engine.Config{MaxRows: 16, TokenBudget: 1 << 20})
	for _, c := range []struct {
		name  string
		temp  float64
		topK  int
		exact bool
	}{
		{"greedy", 0, 0, true},
		{"sampled", 1, 0, true},
		{"sampled top-k", 0.8, 20, true},
		{"sampled batched", 1, 0, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			cfg := modelConfig(3)
			cfg.Temperature, cfg.TopK = c.temp, c.topK
			url := many
			if c.exact {
				cfg.MaxBatch, url = 1, one
			}
			if _, err := Run(context.Background(), cfg, in, jobs.Spec{Out: filepath.Join(root, "local"), Seed: 3}); err != nil {
				t.Fatal(err)
			}
			res, err := Run(context.Background(), serverConfig(cfg, url), in, jobs.Spec{Out: filepath.Join(root, "server"), Seed: 3})
			if err != nil {
				t.Fatal(err)
			}
			want, got := readRows(t, filepath.Join(root, "local")), readRows(t, filepath.Join(root, "server"))
			if len(want) < 12 {
				t.Fatalf("local run: %d rows, want at least one per trajectory", len(want))
			}
			opts := []cmp.Option{}
			if !c.exact {
				opts = append(opts, cmpopts.IgnoreFields(format.Rollout{}, "SamplingLogprobs"))
				if d := maxLogprobDiff(want, got); d > 1e-5 {
					t.Errorf("max |Δ sampling_logprob| = %g, want <= 1e-5", d)
				}
			}
			if diff := cmp.Diff(want, got, opts...); diff != "" {
				t.Errorf("rows (-local +server):\n%s", diff)
			}
			if cfg := res.Manifest.Config; !strings.Contains(string(cfg), `"engine":"server"`) {
				t.Errorf("manifest config %s does not record the engine", cfg)
			}
		})
	}
}

// TestServerPrefixCache rolls out the full-context policy in this process (which
// carries each trajectory's keys and values between turns) and through serve-policy
// with --prefix-cache-tokens, whose engine finds each turn's earlier prompt and
// completion among finished requests: the rows agree (tokens identical, log-probs
// within 1e-5) and the server's later turns prefilled from stored prefixes.
func TestServerPrefixCache(t *testing.T) {
	if err := torch.SetNumThreads(1); err != nil {
		t.Fatal(err)
	}
	f := testFixture(t)
	in := Inputs{Prompts: f.train, Policy: f.policy, Index: f.index, Engine: DefaultEngineClient()}
	url, eng, stop := servePolicy(t, serve.DefaultConfig(), engine.Config{MaxRows: 16, TokenBudget: 1 << 20, PrefixCache: 1 << 16})
	root := t.TempDir()
	cfg := modelConfig(3)
	cfg.Context, cfg.MaxTurns = protocol.Full, 4
	if _, err := Run(context.Background(), cfg, in, jobs.Spec{Out: filepath.Join(root, "local"), Seed: 3}); err != nil {
		t.Fatal(err)
	}
	if _, err := Run(context.Background(), serverConfig(cfg, url), in, jobs.Spec{Out: filepath.Join(root, "server"), Seed: 3}); err != nil {
		t.Fatal(err)
	}
	stop()
	want, got := readRows(t, filepath.Join(root, "local")), readRows(t, filepath.Join(root, "server"))
	if diff := cmp.Diff(want, got, cmpopts.IgnoreFields(format.Rollout{}, "SamplingLogprobs")); diff != "" {
		t.Errorf("rows (-local +server):\n%s", diff)
	}
	if d := maxLogprobDiff(want, got); d > 1e-5 {
		t.Errorf("max |Δ sampling_logprob| = %g, want <= 1e-5", d)
	}
	later := turnRows(got, afterFirst)
	st := eng.PrefixStats()
	if later == 0 || st.Hits < later {
		t.Errorf("%d requests of later turns, %d prefilled from a stored prefix (%+v): want every one", later, st.Hits, st)
	}
	t.Logf("%d rows, %d of later turns; prefix cache %+v", len(got), later, st)
}

// vllm serves the recorded vLLM answers: /v1/models and one completion, and keeps
// the completion bodies it was sent.
type vllm struct {
	models, completion string // file names under testdata
	mu                 sync.Mutex
	bodies             []map[string]any
}

func (v *vllm) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	name := v.models
	if r.URL.Path == "/v1/completions" {
		var body map[string]any
		data, _ := io.ReadAll(r.Body)
		json.Unmarshal(data, &body)
		v.mu.Lock()
		v.bodies = append(v.bodies, body)
		v.mu.Unlock()
		name = v.completion
	}
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		http.Error(w, err.Error(), 500)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(data)
}

// TestRemoteVLLMFormat reads vLLM's /v1/completions answers as recorded by hand from
// its format: ids from choices[0].token_ids (return_token_ids) or from
// "token_id:N" tokens (return_tokens_as_token_ids, older vLLM), sampled log-probs
// from logprobs.token_logprobs, and the request carries what vLLM needs.
func TestRemoteVLLMFormat(t *testing.T) {
	for _, c := range []struct {
		file string
		want protocol.Generation
	}{
		{"vllm_completion.json", protocol.Generation{IDs: []int32{151665, 6697, 151666, 220, 151667, 6722, 151668},
			Logprobs: []float32{-0.0123, -1.5, -0.25, -2.0, -0.000125, -3.75, -0.5}}},
		{"vllm_completion_token_id_strings.json", protocol.Generation{IDs: []int32{151665, 6697, 151666, 220, 151669, 358},
			Logprobs: []float32{-0.0123, -1.5, -0.25, -2.0, -0.75, -1.25}, Truncated: true}},
	} {
		t.Run(c.file, func(t *testing.T) {
			v := &vllm{models: "vllm_models.json", completion: c.file}
			ts := httptest.NewServer(v)
			defer ts.Close()
			cfg := DefaultConfig()
			cfg.Protocol = protocol.Default()
			cfg.Engine, cfg.EngineURL = EngineServer, ts.URL+"/v1"
			r := newRemote(cfg, DefaultEngineClient(), 32768)
			if err := r.open(context.Background()); err != nil {
				t.Fatal(err)
			}
			req := request{UID: "u", Context: []int32{151644, 8948, 198}, Seed: 1<<63 + 5}
			got, err := r.sample(context.Background(), []request{req})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff([]protocol.Generation{c.want}, got); diff != "" {
				t.Errorf("generation (-want +got):\n%s", diff)
			}
			body := v.bodies[0]
			want := map[string]any{
				"model": "Qwen/Qwen2.5-3B-Instruct", "prompt": []any{151644.0, 8948.0, 198.0}, "max_tokens": 128.0,
				"temperature": 1.0, "top_p": 1.0, "top_k": -1.0, "seed": -9223372036854775803.0,
				"stop": []any{"</search>", "</answer>", "<|im_end|>", "<|endoftext|>"}, "logprobs": 0.0, "n": 1.0,
				"return_token_ids": true, "return_tokens_as_token_ids": true, "include_stop_str_in_output": true,
				"skip_special_tokens": false, "spaces_between_special_tokens": false,
			}
			if diff := cmp.Diff(want, body); diff != "" {
				t.Errorf("request body (-want +got):\n%s", diff)
			}
		})
	}
}

// TestRemoteFailures: every failure names the URL; only connection errors and 503
// are retried.
func TestRemoteFailures(t *testing.T) {
	okModels, _ := os.ReadFile(filepath.Join("testdata", "vllm_models.json"))
	okCompletion, _ := os.ReadFile(filepath.Join("testdata", "vllm_completion.json"))
	noLogprobs := strings.Replace(string(okCompletion), `"logprobs": {`, `"logprobs": null, "unused": {`, 1)
	otherModel := strings.Replace(string(okCompletion), `"model": "Qwen/Qwen2.5-3B-Instruct"`, `"model": "other"`, 1)
	for _, c := range []struct {
		name       string
		model      string                    // --engine-model
		completion func(n int) (int, string) // status and body of the n-th completion call
		down       bool
		wantErr    string // "" for success
		wantCalls  int
	}{
		{name: "server down", down: true, wantErr: "server unreachable"},
		{name: "500", completion: func(int) (int, string) {
			return 500, `{"error": {"message": "CUDA out of memory", "type": "InternalServerError", "code": 500}}`
		}, wantErr: "500 Internal Server Error: CUDA out of memory", wantCalls: 1},
		{name: "400", completion: func(int) (int, string) {
			return 400, `{"object": "error", "message": "This model's maximum context length is 32768 tokens", "type": "BadRequestError", "code": 400}`
		}, wantErr: "maximum context length", wantCalls: 1},
		{name: "503 then success", completion: func(n int) (int, string) {
			if n < 2 {
				return 503, `{"error": {"message": "busy", "type": "ServiceUnavailableError", "code": 503}}`
			}
			return 200, string(okCompletion)
		}, wantCalls: 3},
		{name: "503 always", completion: func(int) (int, string) { return 503, `{"error": "busy"}` },
			wantErr: "(after 5 attempts)", wantCalls: 5},
		{name: "missing logprobs", completion: func(int) (int, string) { return 200, noLogprobs },
			wantErr: "no logprobs", wantCalls: 1},
		{name: "answered by another model", completion: func(int) (int, string) { return 200, otherModel },
			wantErr: `answered by model "other"`, wantCalls: 1},
		{name: "engine-model not served", model: "mempo-policy", wantErr: `--engine-model "mempo-policy"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			var calls atomic.Int32
			ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				if r.URL.Path == "/v1/models" {
					w.Write(okModels)
					return
				}
				status, body := c.completion(int(calls.Add(1)) - 1)
				w.WriteHeader(status)
				io.WriteString(w, body)
			}))
			url := ts.URL
			if c.down {
				ts.Close()
			} else {
				defer ts.Close()
			}
			cfg := DefaultConfig()
			cfg.Protocol = protocol.Default()
			cfg.Engine, cfg.EngineURL, cfg.EngineModel = EngineServer, url, c.model
			r := newRemote(cfg, DefaultEngineClient(), 32768)
			var slept []time.Duration
			r.sleep = func(_ context.Context, d time.Duration) error { slept = append(slept, d); return nil }
			err := r.open(context.Background())
			if err == nil {
				_, err = r.sample(context.Background(), []request{{UID: "u", Context: []int32{1, 2, 3}, Seed: 7}})
			}
			switch {
			case c.wantErr == "" && err != nil:
				t.Fatalf("sample = %v, want success", err)
			case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr) || !strings.Contains(err.Error(), url) || !errors.Is(err, ErrEngine)):
				t.Fatalf("sample = %v, want an ErrEngine naming %s and containing %q", err, url, c.wantErr)
			}
			if got := int(calls.Load()); got != c.wantCalls {
				t.Errorf("completion calls = %d, want %d", got, c.wantCalls)
			}
			if c.down && len(slept) != 4 {
				t.Errorf("backoffs against a down server = %v, want 4 (5 attempts)", slept)
			}
		})
	}
}

// BenchmarkServerEngine measures decode throughput through serve-policy: four
// rollout clients, each advancing one turn of 16 fresh episodes at once, against
// one server batching up to 64 requests continuously (compare BenchmarkRollout: one in-process
// rollout of 16 episodes). Figures only.
func BenchmarkServerEngine(b *testing.B) {
	f := testFixture(b)
	url, _, _ := servePolicy(b, serve.DefaultConfig(), engine.DefaultConfig())
	cfg := serverConfig(DefaultConfig(), url)
	cfg.MaxNewTokens = 64
	cfg.Protocol = protocol.Default()
	s, release, err := serverLoader(DefaultEngineClient())(cfg, f.policy, f.tok)
	if err != nil {
		b.Fatal(err)
	}
	defer release()
	q := f.world.Train[0]
	var tokens atomic.Int64
	var elapsed time.Duration
	seed := int64(0)
	for b.Loop() {
		start := time.Now()
		var wg sync.WaitGroup
		errs := make([]error, 4)
		for client := range 4 {
			seed++
			seed := seed
			wg.Add(1)
			go func() {
				defer wg.Done()
				eps := make([]*protocol.Episode, 16)
				slots := map[*protocol.Episode]slot{}
				for i := range eps {
					eps[i], _ = protocol.NewEpisode(cfg.Protocol, nil, f.tok, cfg.Episode(), q.Question, q.K)
					slots[eps[i]] = slot{uid: q.UID, sample: i}
				}
				gen := &episodes{s: s, seed: seed, slots: slots, tokens: func(n int64) { tokens.Add(n) }}
				_, errs[client] = protocol.Advance(context.Background(), eps, gen, noSearch{})
			}()
		}
		wg.Wait()
		elapsed += time.Since(start)
		if err := errors.Join(errs...); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(tokens.Load())/elapsed.Seconds(), "tokens/s")
}
