package rollout

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"

	"github.com/mempo/mempo/agent/protocol"
	"github.com/mempo/mempo/agent/search"
	"github.com/mempo/mempo/format"
	"github.com/mempo/mempo/format/formattest"
	"github.com/mempo/mempo/jobs"
	"github.com/mempo/mempo/model/qwen2"
)

func readRows(t *testing.T, dir string) []format.Rollout {
	t.Helper()
	d, err := format.OpenDataset(dir)
	if err != nil {
		t.Fatal(err)
	}
	r, err := format.OpenShards[format.Rollout](d)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	rows, err := format.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

// pathsScript drives one path per sample: 0 searches then answers, 1 writes an
// invalid turn then answers, 2 searches until the turn budget runs out, 3 is cut by the
// token limit then answers.
func pathsScript(r request) (string, bool) {
	p := protocol.Default()
	srch := p.Render("m"+r.UID[:4], "t", protocol.Search, "capital of "+r.UID[:4])
	answer := p.Render("final", "done", protocol.Answer, "a; b")
	switch {
	case r.Sample == 0 && r.Turn == 0, r.Sample == 2:
		return srch, false
	case r.Sample == 1 && r.Turn == 0:
		return "<mem>kept</mem><think>t</think>no action here", false
	case r.Sample == 3 && r.Turn == 0:
		return "<mem>cut off mid", true
	}
	return answer, false
}

func TestRunRecordsEpisodes(t *testing.T) {
	f := testFixture(t)
	cfg := DefaultConfig()
	cfg.N, cfg.MaxTurns, cfg.PromptsPerShard = 4, 3, 2
	gen := newScripted(f.tok, pathsScript)
	out := filepath.Join(t.TempDir(), "rollouts")
	in := Inputs{Prompts: f.train, Policy: f.policy, Index: f.index}
	res, err := run(context.Background(), cfg, in, jobs.Spec{Out: out, Seed: 7}, gen.loader())
	if err != nil {
		t.Fatal(err)
	}
	rows := readRows(t, out)
	if int64(len(rows)) != res.Manifest.Rows() || len(res.Manifest.Outputs) != 3 {
		t.Errorf("manifest: %d rows in %d shards; read %d rows, want 3 shards (6 prompts, 2 per shard)",
			res.Manifest.Rows(), len(res.Manifest.Outputs), len(rows))
	}
	// Every shard's trajectories advanced together: the first call of a shard holds
	// all N·PromptsPerShard of them.
	if gen.batches[0] != cfg.N*cfg.PromptsPerShard {
		t.Errorf("first generate call had %d requests, want %d (every trajectory of the shard)", gen.batches[0], cfg.N*cfg.PromptsPerShard)
	}
	if got, want := res.Manifest.Metrics["trajectories"], float64(6*cfg.N); got != want {
		t.Errorf("metric trajectories = %v, want %v", got, want)
	}
	// The manifest's timings split the shards' work into decoding and retrieval.
	if got := slices.Sorted(maps.Keys(res.Manifest.Timings.Phases)); !slices.Equal(got, []string{"generate", "retrieve"}) {
		t.Errorf("timings' phases %v, want generate and retrieve", res.Manifest.Timings.Phases)
	}
	policy, err := jobs.CheckpointInput("policy", f.policy)
	if err != nil {
		t.Fatal(err)
	}
	digest := jobs.DigestOf(policy)
	p := protocol.Default()
	type path struct {
		action, finish string
	}
	want := map[int][]path{
		0: {{"search", "stop"}, {"answer", "stop"}},
		1: {{"invalid", "stop"}, {"answer", "stop"}},
		2: {{"search", "stop"}, {"search", "stop"}, {"search", "max_turns"}},
		3: {{"invalid", "length"}, {"answer", "stop"}},
	}
	trajs, err := format.Trajectories(rows)
	if err != nil {
		t.Fatal(err)
	}
	if len(trajs) != 6*cfg.N {
		t.Fatalf("%d trajectories, want %d", len(trajs), 6*cfg.N)
	}
	for _, tr := range trajs {
		var got []path
		for _, r := range tr {
			got = append(got, path{r.Action, r.Finish})
			k := turnKey{r.UID, int(r.Sample), int(r.Turn)}
			asked, gave := gen.asked[k], gen.gave[k]
			if !slices.Equal(r.PromptIDs, asked.Context) {
				t.Errorf("%v: prompt_ids (%d) differ from the context the policy was given (%d)", k, len(r.PromptIDs), len(asked.Context))
			}
			if !slices.Equal(r.ResponseIDs, gave.IDs) || !slices.Equal(r.SamplingLogprobs, gave.Logprobs) {
				t.Errorf("%v: response_ids/sampling_logprobs differ from what the policy returned", k)
			}
			if asked.Seed != requestSeed(7, r.UID, int(r.Sample), int(r.Turn)) {
				t.Errorf("%v: request seed %d, want requestSeed(7, …)", k, asked.Seed)
			}
			if r.Response != f.tok.Decode(gave.IDs) || r.PolicyDigest != digest {
				t.Errorf("%v: response %q, policy_digest %s; want the decoded ids and %s", k, r.Response, r.PolicyDigest, digest)
			}
			if r.MemEnd > r.MemStart {
				mem := f.tok.Decode(r.ResponseIDs[r.MemStart:r.MemEnd])
				if mem != "<mem>"+r.Memory+"</mem>" {
					t.Errorf("%v: mem span decodes to %q, memory column %q", k, mem, r.Memory)
				}
			}
			switch r.Action {
			case "search":
				if r.Finish != "max_turns" && !strings.HasPrefix(r.Observation, "\n\n<information>Doc 1(Title: ") {
					t.Errorf("%v: search observation %.60q, want retrieved documents", k, r.Observation)
				}
				if r.Query != "capital of "+r.UID[:4] {
					t.Errorf("%v: query %q", k, r.Query)
				}
				// The observation before the last allowed turn tells the agent to answer.
				if int(r.Turn) == cfg.MaxTurns-2 && !strings.HasSuffix(r.Observation, p.LastTurn) {
					t.Errorf("%v: observation before the last turn lacks the last-turn note: %.60q", k, r.Observation)
				}
			case "invalid":
				if want := p.Invalid; r.Observation != want {
					t.Errorf("%v: invalid turn observation %q, want the corrective message %q", k, r.Observation, want)
				}
			case "answer":
				if r.Observation != "" || r.Query != "a; b" {
					t.Errorf("%v: answer turn observation %q query %q, want none and \"a; b\"", k, r.Observation, r.Query)
				}
			}
		}
		if diff := cmp.Diff(want[int(tr[0].Sample)], got, cmp.AllowUnexported(path{})); diff != "" {
			t.Errorf("uid %s sample %d: turns (-want +got):\n%s", tr[0].UID, tr[0].Sample, diff)
		}
		// The mempo rule end to end: turn 1's context is the prompt, turn 0's memory
		// and action spans and its observation, as generated and encoded.
		if len(tr) > 1 && tr[0].Action == "search" {
			r0 := tr[0]
			var ctx []int32
			ctx = append(ctx, tr[0].PromptIDs...)
			ctx = append(ctx, f.tok.Encode("<mem>"+r0.Memory+"</mem>")...)
			ctx = append(ctx, f.tok.Encode("<search>"+r0.Query+"</search>")...)
			ctx = append(ctx, f.tok.Encode(r0.Observation)...)
			if !slices.Equal(tr[1].PromptIDs, ctx) {
				t.Errorf("uid %s sample %d turn 1: prompt_ids is not prompt + mem + action + observation", r0.UID, r0.Sample)
			}
		}
	}
}

func TestRunRetrieverDown(t *testing.T) {
	f := testFixture(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String()
	ln.Close() // nothing listens there now
	cfg := DefaultConfig()
	cfg.N, cfg.MaxTurns, cfg.RetrieverURL = 2, 2, url
	gen := newScripted(f.tok, f.oracle)
	out := filepath.Join(t.TempDir(), "rollouts")
	in := Inputs{Prompts: f.train, Policy: f.policy, Client: search.ClientConfig{Attempts: 1, TimeoutS: 5}}
	_, err = run(context.Background(), cfg, in, jobs.Spec{Out: out}, gen.loader())
	if !errors.Is(err, search.ErrUnreachable) || !strings.Contains(err.Error(), ln.Addr().String()) {
		t.Fatalf("Run with the retriever down = %v, want ErrUnreachable naming %s", err, url)
	}
	if _, err := format.OpenDataset(out); !errors.Is(err, format.ErrNotDataset) {
		t.Errorf("after the failure OpenDataset = %v, want ErrNotDataset (nothing published)", err)
	}
	if len(gen.batches) != 0 {
		t.Errorf("the policy generated %d batches before the retriever was found down, want none", len(gen.batches))
	}
}

func TestRunBadInputs(t *testing.T) {
	f := testFixture(t)
	tests := []struct {
		name string
		edit func(*Config, *Inputs)
		want string
	}{
		{"no retriever", func(c *Config, in *Inputs) { in.Index = "" }, "--index DIR"},
		{"two retrievers", func(c *Config, in *Inputs) { c.RetrieverURL = "http://127.0.0.1:1" }, "give one retriever"},
		{"not an index", func(c *Config, in *Inputs) { in.Index = f.policy }, "--index"},
		{"policy without tokenizer", func(c *Config, in *Inputs) { in.Policy = f.index }, "--policy"},
		{"prompts not a dataset", func(c *Config, in *Inputs) { in.Prompts = f.policy }, "--prompts"},
		{"bad context", func(c *Config, in *Inputs) { c.Context = "partial" }, "--context"},
		{"zero samples", func(c *Config, in *Inputs) { c.N = 0 }, "--n 0"},
		{"zero shard size", func(c *Config, in *Inputs) { c.PromptsPerShard = 0 }, "--prompts-per-shard 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultConfig()
			in := Inputs{Prompts: f.train, Policy: f.policy, Index: f.index}
			tt.edit(&cfg, &in)
			out := filepath.Join(t.TempDir(), "rollouts")
			gen := newScripted(f.tok, f.oracle)
			_, err := run(context.Background(), cfg, in, jobs.Spec{Out: out}, gen.loader())
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Run = %v, want an error naming %q", err, tt.want)
			}
		})
	}
}

// TestContextPeakTokens is the PT report: with the mempo context the peak
// single-call context stays nearly flat as the number of objectives K grows, while the
// full context grows with every search. The scripted oracle makes both policies take
// the same actions, so only the context rule differs.
func TestContextPeakTokens(t *testing.T) {
	f := testFixture(t)
	pt := map[protocol.ContextPolicy]map[int]float64{}
	for _, policy := range []protocol.ContextPolicy{protocol.Mempo, protocol.Full} {
		pt[policy] = map[int]float64{}
		for _, k := range []int{2, 4, 6} {
			cfg := DefaultConfig()
			cfg.N, cfg.Context, cfg.MaxTurns = 1, policy, 16
			gen := newScripted(f.tok, f.oracle)
			out := filepath.Join(t.TempDir(), "rollouts")
			res, err := run(context.Background(), cfg, Inputs{Prompts: f.test[k], Policy: f.policy, Index: f.index},
				jobs.Spec{Out: out}, gen.loader())
			if err != nil {
				t.Fatal(err)
			}
			m := res.Manifest.Metrics
			if m["answered_frac"] != 1 {
				t.Errorf("%s K=%d: answered_frac %v, want 1 (the oracle always answers)", policy, k, m["answered_frac"])
			}
			pt[policy][k] = m["pt_mean"]
			t.Logf("context %-5s K=%d: PT mean %6.0f, TT mean %7.0f, turns %.1f", policy, k, m["pt_mean"], m["tt_mean"], m["turns_mean"])
		}
	}
	mempo := pt[protocol.Mempo][6] - pt[protocol.Mempo][2]
	full := pt[protocol.Full][6] - pt[protocol.Full][2]
	t.Logf("PT growth K=2→6: mempo %+.0f tokens (%.2fx), full %+.0f tokens (%.2fx)",
		mempo, pt[protocol.Mempo][6]/pt[protocol.Mempo][2], full, pt[protocol.Full][6]/pt[protocol.Full][2])
	if full <= 2*mempo {
		t.Errorf("PT growth K=2→6: full %+.0f, mempo %+.0f; want full to grow at least twice as fast", full, mempo)
	}
}

// TestPromptLongerThanContext: a prompt whose first context fills the policy's
// positions is refused before any work, naming its uid and both lengths, instead of
// passing with empty responses and failing the log-prob stage on the whole dataset.
func TestPromptLongerThanContext(t *testing.T) {
	f := testFixture(t)
	mc, err := qwen2.ReadConfig(filepath.Join(f.policy, qwen2.ConfigFile))
	if err != nil {
		t.Fatal(err)
	}
	long := format.Prompt{UID: "long0001", DataSource: "test", Split: "train", SourceIndex: []int64{1},
		Question: strings.Repeat("Who founded the company in the capital city? ", mc.MaxPositions/4), Golds: [][]string{{"x"}}}
	short := format.Prompt{UID: "short001", DataSource: "test", Split: "train", SourceIndex: []int64{0},
		Question: "Who founded it?", Golds: [][]string{{"x"}}}
	prompts := filepath.Join(t.TempDir(), "prompts")
	if _, err := formattest.WriteDataset(prompts, "test", [][]format.Prompt{{long, short}}); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.N, cfg.MaxTurns = 2, 2
	out := filepath.Join(t.TempDir(), "rollouts")
	gen := newScripted(f.tok, pathsScript)
	_, err = run(context.Background(), cfg, Inputs{Prompts: prompts, Policy: f.policy, Index: f.index}, jobs.Spec{Out: out}, gen.loader())
	if !errors.Is(err, ErrTooLong) {
		t.Fatalf("run = %v, want ErrTooLong", err)
	}
	for _, want := range []string{"uid long0001", "context is ", fmt.Sprintf("max_position_embeddings is %d", mc.MaxPositions), prompts} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("run = %q, want it to mention %q", err, want)
		}
	}
	if len(gen.batches) != 0 {
		t.Errorf("the policy generated %d batches before the refusal, want none", len(gen.batches))
	}
	if entries, _ := os.ReadDir(filepath.Dir(out)); len(entries) != 0 {
		t.Errorf("refused run left %v beside its output", entries)
	}

	// --skip-long-prompts rolls out the short prompt only, counts the long one in the
	// manifest and names it in a warning.
	cfg.SkipLongPrompts = true
	var log bytes.Buffer
	res, err := run(context.Background(), cfg, Inputs{Prompts: prompts, Policy: f.policy, Index: f.index},
		jobs.Spec{Out: out, Log: slog.New(slog.NewTextHandler(&log, nil))}, newScripted(f.tok, pathsScript).loader())
	if err != nil {
		t.Fatalf("run with --skip-long-prompts = %v", err)
	}
	rows, err := format.ReadDataset[format.Rollout](out)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if r.UID != short.UID {
			t.Errorf("rolled out %s; want only %s", r.UID, short.UID)
		}
	}
	if got := res.Manifest.Metrics["prompts_skipped_long"]; got != 1 {
		t.Errorf("manifest prompts_skipped_long = %v, want 1", got)
	}
	if !strings.Contains(log.String(), "long0001") {
		t.Errorf("log does not name the skipped prompt:\n%s", log.String())
	}
}

// TestRunWritesValidUTF8 has the policy emit bytes that are not UTF-8: a response cut
// by the token limit inside a character, and a stray byte in a memory and a query.
// Every string column must still be valid UTF-8 (Arrow tools refuse anything else),
// with the ids keeping the exact output.
func TestRunWritesValidUTF8(t *testing.T) {
	f := testFixture(t)
	cfg := DefaultConfig()
	cfg.N, cfg.MaxTurns, cfg.PromptsPerShard = 2, 3, 2
	p := protocol.Default()
	gen := newScripted(f.tok, func(r request) (string, bool) {
		switch {
		case r.Sample == 0 && r.Turn == 0:
			return "<mem>caf\xc3", true
		case r.Sample == 1 && r.Turn == 0:
			return p.Render("m\xff", "t", protocol.Search, "q\xfe"), false
		}
		return p.Render("final", "done", protocol.Answer, "a"), false
	})
	out := filepath.Join(t.TempDir(), "rollouts")
	in := Inputs{Prompts: f.train, Policy: f.policy, Index: f.index}
	if _, err := run(context.Background(), cfg, in, jobs.Spec{Out: out, Seed: 7}, gen.loader()); err != nil {
		t.Fatal(err)
	}
	invalid := 0
	for _, r := range readRows(t, out) {
		k := turnKey{r.UID, int(r.Sample), int(r.Turn)}
		raw := f.tok.Decode(gen.gave[k].IDs)
		if !utf8.ValidString(raw) {
			invalid++
		}
		for col, s := range map[string]string{"response": r.Response, "memory": r.Memory, "query": r.Query, "observation": r.Observation} {
			if !utf8.ValidString(s) {
				t.Errorf("%v: column %s = %q is not valid UTF-8", k, col, s)
			}
		}
		if want := strings.ToValidUTF8(raw, "\uFFFD"); r.Response != want {
			t.Errorf("%v: response %q, want %q", k, r.Response, want)
		}
		if !slices.Equal(r.ResponseIDs, gen.gave[k].IDs) {
			t.Errorf("%v: response_ids differ from what the policy returned", k)
		}
	}
	if invalid == 0 {
		t.Fatal("no response decoded to invalid UTF-8: the test does not test anything")
	}
}
