package logprob

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"maps"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/mempo/mempo/format"
	"github.com/mempo/mempo/jobs"
	"github.com/mempo/mempo/model/qwen2"
	"github.com/mempo/mempo/model/torch/torchtest"
	"github.com/sugarme/gotch/ts"
)

// TestRunOldMatchesSampling: rollouts sampled by qwen2.Generate at temperature 1 get
// old log-probs equal to their sampling log-probs (1e-4: the KV-cache decode and the
// one-forward scoring reduce in different orders); a reference with the policy's
// digest is not run again; a rerun is a cache hit.
func TestRunOldMatchesSampling(t *testing.T) {
	f := newFixture(t, 3, 3)
	var log bytes.Buffer
	spec := jobs.Spec{Log: slog.New(slog.NewTextHandler(&log, nil))}
	base := liveTensors()
	res, got := f.run(t, testConfig(), "logprobs", spec)
	if n := liveTensors(); n != base {
		t.Errorf("Run left %d live tensors, want %d", n, base)
	}
	rows := slices.Concat(f.rolls...)
	if res.Hit || len(got) != len(rows) || len(res.Manifest.Outputs) != len(f.rolls) {
		t.Fatalf("Run = hit %v, %d rows in %d shards; want a fresh run, %d rows in %d shards",
			res.Hit, len(got), len(res.Manifest.Outputs), len(rows), len(f.rolls))
	}
	for i, r := range rows {
		if k := key(got[i]); k != key(format.Logprob{UID: r.UID, Sample: r.Sample, Turn: r.Turn}) {
			t.Fatalf("row %d is %s, want the rollouts' order", i, k)
		}
		if d := torchtest.MaxAbsDiff(got[i].OldLogprobs, r.SamplingLogprobs); d > 1e-4 {
			t.Errorf("%s: max |old − sampling| = %g, want <= 1e-4", key(got[i]), d)
		}
		if diff := cmp.Diff(got[i].OldLogprobs, got[i].RefLogprobs); diff != "" {
			t.Errorf("%s: ref == policy, yet ref_logprobs differ (-old +ref):\n%s", key(got[i]), diff)
		}
	}
	memories := 0
	for i := range rows {
		if hasMemory(&rows[i]) {
			memories++
		}
	}
	if m := res.Manifest.Metrics; m["turns"] != float64(len(rows)) || m["memory_turns"] != float64(memories) {
		t.Errorf("manifest metrics turns %v memory_turns %v, want %d and %d", m["turns"], m["memory_turns"], len(rows), memories)
	}
	if v, ok := res.Manifest.Metrics["sampling_drift_max"]; !ok || v > 1e-4 {
		t.Errorf("manifest sampling_drift_max %v (present %v), want <= 1e-4", v, ok)
	}
	if strings.Contains(log.String(), "sampling log-probs differ") {
		t.Errorf("log warns of drift on rollouts sampled from the policy:\n%s", log.String())
	}
	if !strings.Contains(log.String(), "reusing the old log-probs") {
		t.Errorf("log does not say the reference pass was skipped:\n%s", log.String())
	}
	checkPassTimes(t, log.String(), len(f.rolls), "old_pass_s", "memory_pass_s", "memory_per_old", "-ref_pass_s")
	checkPhases(t, res.Manifest, "memory_pass", "old_pass")
	again, _ := f.run(t, testConfig(), "logprobs", jobs.Spec{})
	if !again.Hit {
		t.Errorf("second Run: hit false, want a cache hit")
	}
	off := testConfig()
	off.MemoryPass = false
	log.Reset()
	res, got = f.run(t, off, "logprobs", spec)
	if res.Hit {
		t.Errorf("Run with --memory-pass=false: cache hit, want a recompute")
	}
	for _, r := range got {
		if r.PMem != nil || r.PFull != nil {
			t.Fatalf("%s: memory pass off, yet p_mem %v p_full %v", key(r), r.PMem, r.PFull)
		}
	}
	checkPassTimes(t, log.String(), len(f.rolls), "old_pass_s", "-memory_pass_s")
	checkPhases(t, res.Manifest, "old_pass")
}

// checkPhases checks that the manifest's timings hold exactly the passes want, each
// with a positive time.
func checkPhases(t *testing.T, m *format.Manifest, want ...string) {
	t.Helper()
	got := slices.Sorted(maps.Keys(m.Timings.Phases))
	if !slices.Equal(got, want) {
		t.Errorf("manifest timings' phases %v, want %v", m.Timings.Phases, want)
	}
	for k, v := range m.Timings.Phases {
		if v <= 0 {
			t.Errorf("manifest phase %s took %v s, want > 0", k, v)
		}
	}
}

// checkPassTimes checks that log has one "shard scored" line per shard, each with
// every key of keys=value and none of the keys written -key.
func checkPassTimes(t *testing.T, log string, shards int, keys ...string) {
	t.Helper()
	var lines []string
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, `msg="shard scored"`) {
			lines = append(lines, l)
		}
	}
	if len(lines) != shards {
		t.Fatalf("%d \"shard scored\" lines, want one per shard (%d):\n%s", len(lines), shards, log)
	}
	for _, l := range lines {
		for _, k := range keys {
			absent := strings.HasPrefix(k, "-")
			if strings.Contains(l, " "+strings.TrimPrefix(k, "-")+"=") == absent {
				t.Errorf("shard line %q: key %s present %v, want %v", l, strings.TrimPrefix(k, "-"), absent, !absent)
			}
		}
	}
}

// TestRunWarnsOnDrift: scoring rollouts sampled at temperature 1 as if sampled at
// 0.1 puts the old log-probs nats away from the sampling ones; the manifest reports the
// gap and the log warns.
func TestRunWarnsOnDrift(t *testing.T) {
	f := newFixture(t, 2, 2)
	var log bytes.Buffer
	cfg := testConfig()
	cfg.Temperature = 0.1
	res, _ := f.run(t, cfg, "logprobs", jobs.Spec{Log: slog.New(slog.NewTextHandler(&log, nil))})
	if v := res.Manifest.Metrics["sampling_drift_max"]; v <= DriftWarn {
		t.Errorf("sampling_drift_max %v at the wrong temperature, want above %v", v, DriftWarn)
	}
	if !strings.Contains(log.String(), "sampling log-probs differ") {
		t.Errorf("log does not warn of the drift:\n%s", log.String())
	}
}

// TestRunDType: with a dtype the models are scored in that precision: the fixture's
// float32 policy scored in bfloat16 gives other old log-probs, within bfloat16's
// rounding of the float32 ones, under another cache key, and the manifest's config
// records it.
func TestRunDType(t *testing.T) {
	f := newFixture(t, 2, 2)
	base, want := f.run(t, testConfig(), "float32", jobs.Spec{})
	cfg := testConfig()
	cfg.DType = "bfloat16"
	res, got := f.run(t, cfg, "bfloat16", jobs.Spec{})
	if res.Manifest.CacheKey == base.Manifest.CacheKey {
		t.Errorf("dtype bfloat16 kept the float32 run's cache key")
	}
	if !strings.Contains(string(res.Manifest.Config), `"dtype":"bfloat16"`) {
		t.Errorf("manifest config %s does not record the dtype", res.Manifest.Config)
	}
	var most float64
	for i := range got {
		most = max(most, torchtest.MaxAbsDiff(got[i].OldLogprobs, want[i].OldLogprobs))
	}
	if !(most > 0 && most < 0.5) {
		t.Errorf("bfloat16 old log-probs differ from float32 ones by at most %g, want rounding: above 0, below 0.5", most)
	}
}

// TestRunAttention: with --attention sdpa every pass of several tokens attends through
// libtorch's fused kernel: old log-probs within float32 rounding of the default's but
// not equal to them (the fixture's short turns materialise under auto), under another cache key, and the
// manifest's config records it.
func TestRunAttention(t *testing.T) {
	f := newFixture(t, 2, 2)
	base, want := f.run(t, testConfig(), "auto", jobs.Spec{})
	cfg := testConfig()
	cfg.Attention = "sdpa"
	res, got := f.run(t, cfg, "sdpa", jobs.Spec{})
	if res.Manifest.CacheKey == base.Manifest.CacheKey {
		t.Errorf("attention sdpa kept the default's cache key")
	}
	if !strings.Contains(string(res.Manifest.Config), `"attention":"sdpa"`) {
		t.Errorf("manifest config %s does not record the attention", res.Manifest.Config)
	}
	var most float64
	for i := range got {
		most = max(most, torchtest.MaxAbsDiff(got[i].OldLogprobs, want[i].OldLogprobs), torchtest.MaxAbsDiff(got[i].RefLogprobs, want[i].RefLogprobs))
	}
	if !(most > 0 && most <= 1e-4) {
		t.Errorf("fused old and reference log-probs differ from materialised ones by %g, want float32 rounding: above 0 (another kernel ran), at most 1e-4", most)
	}
}

// TestRunRefPass: a reference with other weights gets its own pass, equal to scoring
// the rollouts with that model directly.
func TestRunRefPass(t *testing.T) {
	f := newFixture(t, 2, 2)
	ref := newModel(t, f.tok, 99, nil)
	f.in.Ref = filepath.Join(f.dir, "ref")
	save(t, ref, f.tok, f.in.Ref)
	ref.Drop()
	var log bytes.Buffer
	res, got := f.run(t, testConfig(), "logprobs", jobs.Spec{Log: slog.New(slog.NewTextHandler(&log, nil))})
	checkPassTimes(t, log.String(), len(f.rolls), "old_pass_s", "ref_pass_s", "memory_pass_s")
	checkPhases(t, res.Manifest, "memory_pass", "old_pass", "ref_pass")
	m := loadModel(t, f.in.Ref)
	rows := slices.Concat(f.rolls...)
	var pairs []qwen2.Pair
	for _, r := range rows {
		pairs = append(pairs, turnPair(&r))
	}
	want, err := m.LogProbs(pairs, qwen2.ScoreConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range rows {
		if d := torchtest.MaxAbsDiff(got[i].RefLogprobs, want[i].LogProbs); d > 1e-5 {
			t.Errorf("%s: max |ref − direct| = %g, want <= 1e-5", key(got[i]), d)
		}
		if torchtest.MaxAbsDiff(got[i].RefLogprobs, got[i].OldLogprobs) < 1e-3 {
			t.Errorf("%s: ref_logprobs equal old_logprobs, want the reference model's own", key(got[i]))
		}
	}
}

// TestRunBadInput: each bad input is an error of its class naming the row, and nothing
// is published.
func TestRunBadInput(t *testing.T) {
	f := newFixture(t, 2, 2)
	good := f.rolls
	nan := newModel(t, f.tok, 7, nil)
	nanDir := filepath.Join(f.dir, "nan")
	fill := ts.MustOfSlice(slices.Repeat([]float32{float32(math.NaN())}, int(nan.Embed.Numel())))
	shaped := fill.MustView(nan.Embed.MustSize(), true)
	nan.Embed.Copy_(shaped)
	shaped.MustDrop()
	save(t, nan, f.tok, nanDir)
	nan.Drop()

	tests := []struct {
		name   string
		edit   func(rows []format.Rollout) // applied to shard 0; the error must name its row 1
		policy string                      // "" keeps the fixture's
		want   error
		msg    string
	}{
		{"digest mismatch", func(rs []format.Rollout) { rs[1].PolicyDigest = "0123456789abcdef" }, "", ErrPolicy, "policy_digest 0123456789ab"},
		{"memory span past the response", func(rs []format.Rollout) { rs[1].MemStart, rs[1].MemEnd = 1, int32(len(rs[1].ResponseIDs)+1) }, "", ErrInput, "memory span"},
		{"memory span reversed", func(rs []format.Rollout) { rs[1].MemStart, rs[1].MemEnd = 2, 1 }, "", ErrInput, "memory span [2, 1)"},
		// Rollouts written before observation_ids were recorded: P_full would miss every document.
		{"observation without ids", func(rs []format.Rollout) { rs[1].ObservationIDs = nil }, "", ErrInput, "re-run the rollout stage"},
		{"unknown uid", func(rs []format.Rollout) {
			for j := range rs {
				rs[j].UID = "q0"
			}
		}, "", ErrInput, "row 0 (uid q0 sample 0 turn 0): uid not in the prompts"},
		{"sequence too long", func(rs []format.Rollout) { rs[1].PromptIDs = make([]int32, 4096) }, "", ErrContext, "max_position_embeddings 4096"},
		{"history too long", func(rs []format.Rollout) { rs[0].ObservationIDs = make([]int32, 4090) }, "", ErrContext, "P_full needs"},
		{"token outside vocab", func(rs []format.Rollout) { rs[1].ResponseIDs[0] = 1 << 20 }, "", ErrInput, "response_ids"},
		{"NaN log-probs", nil, nanDir, ErrNonFinite, "old_logprobs"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f.rolls = make([][]format.Rollout, len(good))
			for s := range good {
				f.rolls[s] = slices.Clone(good[s])
			}
			f.dir = t.TempDir()
			f.in.Policy, f.in.Ref = filepath.Join(filepath.Dir(nanDir), "policy"), filepath.Join(filepath.Dir(nanDir), "policy")
			if tt.policy != "" {
				f.in.Policy, f.in.Ref = tt.policy, tt.policy
				in, _ := jobs.CheckpointInput("policy", tt.policy)
				d := jobs.DigestOf(in)
				for s := range f.rolls {
					for j := range f.rolls[s] {
						f.rolls[s][j].PolicyDigest = d
					}
				}
			}
			if tt.edit != nil {
				for j := range f.rolls[0] {
					f.rolls[0][j].ResponseIDs = slices.Clone(f.rolls[0][j].ResponseIDs)
				}
				tt.edit(f.rolls[0])
			}
			f.writeInputs(t)
			out := filepath.Join(f.dir, "logprobs")
			_, err := Run(context.Background(), testConfig(), f.in, jobs.Spec{Out: out})
			if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("case %d: Run = %v, want %v mentioning %q", i, err, tt.want, tt.msg)
			}
			if tt.edit != nil && !strings.Contains(err.Error(), "row 1 (uid") && !strings.Contains(tt.msg, "row 0") {
				t.Errorf("Run = %v, want the error to name row 1", err)
			}
			if _, err := format.OpenDataset(out); !errors.Is(err, format.ErrNotDataset) {
				t.Errorf("after a failed run, OpenDataset = %v, want ErrNotDataset (nothing published)", err)
			}
		})
	}
}

// TestRunResume: a run that fails after its first shard is recorded, rerun, resumes
// from that shard and publishes exactly the bytes of an uninterrupted run.
func TestRunResume(t *testing.T) {
	f := newFixture(t, 2, 2)
	res, _ := f.run(t, testConfig(), "whole", jobs.Spec{})

	ctx, cancel := context.WithCancel(context.Background())
	spec := jobs.Spec{Out: filepath.Join(f.dir, "resumed"), Trace: func(step jobs.Step, shard int) {
		if step == jobs.StepRecorded && shard == 0 {
			cancel()
		}
	}}
	if _, err := Run(ctx, testConfig(), f.in, spec); !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted Run = %v, want context.Canceled", err)
	}
	if _, err := format.OpenDataset(spec.Out); !errors.Is(err, format.ErrNotDataset) {
		t.Fatalf("after an interrupted run, OpenDataset = %v, want ErrNotDataset", err)
	}
	spec.Trace = nil
	again, err := Run(context.Background(), testConfig(), f.in, spec)
	if err != nil {
		t.Fatal(err)
	}
	if again.Resumed != 1 {
		t.Errorf("rerun resumed %d shards, want 1", again.Resumed)
	}
	if a, b := res.Manifest.Digest(), again.Manifest.Digest(); a != b {
		t.Errorf("resumed output digest %s, uninterrupted %s: want identical", b, a)
	}
}

// TestRunWithoutPFull: --p-ctx without the memory pass is a configuration error, and
// a history too long for P_full stops the stage only when P_full is scored.
func TestRunWithoutPFull(t *testing.T) {
	f := newFixture(t, 2, 2)
	cfg := testConfig()
	cfg.MemoryPass, cfg.PCtx = false, true
	if _, err := Run(context.Background(), cfg, f.in, jobs.Spec{Out: filepath.Join(f.dir, "bad")}); !errors.Is(err, ErrConfig) {
		t.Errorf("--p-ctx without the memory pass: Run = %v, want ErrConfig", err)
	}
	f.rolls[0][0].ObservationIDs = make([]int32, 4090)
	f.dir = t.TempDir()
	f.writeInputs(t)
	if _, err := Run(context.Background(), testConfig(), f.in, jobs.Spec{Out: filepath.Join(f.dir, "full")}); !errors.Is(err, ErrContext) {
		t.Fatalf("history too long with P_full: Run = %v, want ErrContext", err)
	}
	cfg = testConfig()
	cfg.PFull, cfg.PCtx = false, true
	_, got := f.run(t, cfg, "ctx", jobs.Spec{})
	for _, r := range got {
		if r.PFull != nil {
			t.Fatalf("%s: p_full %v with --p-full=false", key(r), *r.PFull)
		}
	}
}
