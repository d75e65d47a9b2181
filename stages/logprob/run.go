package logprob

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/mempo/mempo/format"
	"github.com/mempo/mempo/jobs"
	"github.com/mempo/mempo/model/bpe"
	"github.com/mempo/mempo/model/qwen2"
	"github.com/mempo/mempo/model/torch"
)

// Stage is the logprob stage's name in cache keys and manifests.
const Stage = "logprob"

// Inputs are what the stage reads.
type Inputs struct {
	Rollouts string // rollouts dataset
	Prompts  string // prompts dataset holding the golds; needed by the memory pass
	Policy   string // checkpoint that generated the rollouts (the old policy)
	Ref      string // frozen reference checkpoint
}

// Run writes a logprobs dataset with one shard per rollouts shard, rows in the
// rollouts' (uid, sample, turn) order. Every rollout row must carry the policy
// checkpoint's digest (jobs.CheckpointInput: its commit record's), else ErrPolicy. When the reference checkpoint
// has the same digest as the policy, its log-probs are the old ones and no second pass
// runs. Models load on the first shard that needs them, so a cache hit loads nothing.
func Run(ctx context.Context, cfg Config, in Inputs, spec jobs.Spec) (*jobs.Result, error) {
	torch.BoundHeap()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.MemoryPass && in.Prompts == "" {
		return nil, fmt.Errorf("logprob: the memory pass needs the prompts dataset with the golds (--prompts): %w", ErrConfig)
	}
	rolls, err := format.OpenDataset(in.Rollouts)
	if err == nil {
		err = format.CheckKind[format.Rollout](rolls)
	}
	if err != nil {
		return nil, fmt.Errorf("logprob: rollouts: %w", err)
	}
	spec.Inputs = nil
	add := func(in format.Input, err error) error {
		if err != nil {
			return fmt.Errorf("logprob: %w", err)
		}
		spec.Inputs = append(spec.Inputs, in)
		return nil
	}
	if err := add(jobs.DatasetInput("rollouts", in.Rollouts)); err != nil {
		return nil, err
	}
	if cfg.MemoryPass {
		if err := add(jobs.DatasetInput("prompts", in.Prompts)); err != nil {
			return nil, err
		}
	}
	if err := add(jobs.CheckpointInput("policy", in.Policy)); err != nil {
		return nil, err
	}
	if err := add(jobs.CheckpointInput("ref", in.Ref)); err != nil {
		return nil, err
	}
	log := spec.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	n := len(spec.Inputs)
	st := &state{cfg: cfg, in: in, log: log,
		policyDigest: jobs.DigestOf(spec.Inputs[n-2]),
		reuseRef:     spec.Inputs[n-2].Digest == spec.Inputs[n-1].Digest}
	defer st.drop()
	spec.Stage, spec.Kind, spec.SchemaVersion = Stage, format.KindLogprobs, format.LogprobsVersion
	spec.Config, spec.Shards = cfg, rolls.Len()
	spec.Summarize = func(dir string, outputs []format.Output) (map[string]float64, error) {
		return summarize(dir, outputs, rolls)
	}
	res, err := jobs.Run(ctx, spec, func(ctx context.Context, w *jobs.Work) error {
		return st.shard(rolls, w)
	})
	if err == nil && res.Manifest != nil {
		warnDrift(log, res.Manifest.Metrics)
	}
	return res, err
}

// state holds what the shards share: the models and golds, loaded once on first use.
type state struct {
	cfg          Config
	in           Inputs
	log          *slog.Logger
	policyDigest string
	reuseRef     bool

	loaded      bool
	policy, ref *qwen2.Model // ref is nil when reuseRef
	tok         *bpe.Tokenizer
	targets     map[string]target
	// facts is whether some prompt carries supporting facts: the shards then write the
	// optional mem_facts and facts columns, all of them alike.
	facts bool
}

func (s *state) drop() {
	if s.policy != nil {
		s.policy.Drop()
	}
	if s.ref != nil {
		s.ref.Drop()
	}
}

func (s *state) load() error {
	if s.loaded {
		return nil
	}
	opt := qwen2.Options{Device: s.cfg.Device, DType: s.cfg.DType, Attention: s.cfg.Attention}
	var err error
	if s.policy, err = qwen2.Load(s.in.Policy, opt); err != nil {
		return fmt.Errorf("logprob: policy: %w", err)
	}
	if s.reuseRef {
		s.log.Info("reference checkpoint has the policy's digest: reusing the old log-probs as ref log-probs, no reference pass",
			"policy", s.in.Policy, "ref", s.in.Ref, "digest", s.policyDigest[:12])
	} else {
		if err := sameTokenizer(s.in.Policy, s.in.Ref); err != nil {
			return err
		}
		if s.ref, err = qwen2.Load(s.in.Ref, opt); err != nil {
			return fmt.Errorf("logprob: ref: %w", err)
		}
		if a, b := s.policy.Config.VocabSize, s.ref.Config.VocabSize; a != b {
			return fmt.Errorf("logprob: ref %s: vocab_size %d, policy %s has %d: checkpoint/tokenizer mismatch: %w",
				s.in.Ref, b, s.in.Policy, a, ErrInput)
		}
	}
	if s.cfg.MemoryPass {
		if err := s.loadTargets(); err != nil {
			return err
		}
	}
	s.loaded = true
	return nil
}

// sameTokenizer fails when both checkpoints hold a tokenizer.json and they differ: the
// reference would then score other tokens than the ids the policy generated.
func sameTokenizer(policy, ref string) error {
	a, errA := os.ReadFile(filepath.Join(policy, format.TokenizerFile))
	b, errB := os.ReadFile(filepath.Join(ref, format.TokenizerFile))
	if errA == nil && errB == nil && !bytes.Equal(a, b) {
		return fmt.Errorf("logprob: %s differs from %s: the reference must share the policy's tokenizer: %w",
			filepath.Join(ref, format.TokenizerFile), filepath.Join(policy, format.TokenizerFile), ErrInput)
	}
	return nil
}

// loadTargets tokenizes every question's gold answer with the policy's tokenizer.
func (s *state) loadTargets() error {
	path := filepath.Join(s.in.Policy, format.TokenizerFile)
	tok, err := bpe.Load(path)
	if err != nil {
		return fmt.Errorf("logprob: policy tokenizer (the memory pass encodes the gold answers with it): %w", err)
	}
	if err := s.policy.Config.CheckTokenizer(tok, bpe.ImStart, bpe.ImEnd); err != nil {
		return fmt.Errorf("logprob: %s: %w", path, err)
	}
	s.tok = tok
	d, err := format.OpenDataset(s.in.Prompts)
	if err != nil {
		return fmt.Errorf("logprob: prompts: %w", err)
	}
	r, err := format.OpenShards[format.Prompt](d)
	if err != nil {
		return fmt.Errorf("logprob: prompts: %w", err)
	}
	defer r.Close()
	s.targets = map[string]target{}
	for r.Next() {
		p := r.Row()
		tg, err := answerTarget(tok, s.cfg, p.Golds)
		if err != nil {
			return fmt.Errorf("logprob: prompts %s: uid %s: %w: %w", s.in.Prompts, p.UID, err, ErrInput)
		}
		tg.facts = p.Facts
		s.facts = s.facts || len(p.Facts) > 0
		s.targets[p.UID] = tg
	}
	if err := r.Err(); err != nil {
		return fmt.Errorf("logprob: prompts: %w", err)
	}
	return nil
}

func where(i int, r *format.Rollout) string {
	return fmt.Sprintf("row %d (uid %s sample %d turn %d)", i, r.UID, r.Sample, r.Turn)
}

// check validates one rollout row before anything is computed for it.
func (s *state) check(file string, i int, r *format.Rollout) error {
	at := func(format string, args ...any) string {
		return file + ": " + where(i, r) + ": " + fmt.Sprintf(format, args...)
	}
	if d := strings.TrimPrefix(r.PolicyDigest, "dir:"); d != s.policyDigest {
		return fmt.Errorf("%s: %w", at("policy_digest %.12s…, --policy %s has %.12s…: rerun the rollouts with this policy or pass the checkpoint that generated them",
			d, s.in.Policy, s.policyDigest), ErrPolicy)
	}
	if err := r.Check(); err != nil {
		return fmt.Errorf("%s: %w", at("%v", err), ErrInput)
	}
	if len(r.PromptIDs) == 0 {
		return fmt.Errorf("%s: %w", at("empty prompt_ids: the first response token needs a context"), ErrInput)
	}
	mc := s.policy.Config
	if n := len(r.PromptIDs) + len(r.ResponseIDs); n > mc.MaxPositions {
		return fmt.Errorf("%s: %w", at("prompt %d + response %d tokens exceed max_position_embeddings %d", len(r.PromptIDs), len(r.ResponseIDs), mc.MaxPositions), ErrContext)
	}
	for _, col := range []struct {
		name string
		ids  []int32
	}{{"prompt_ids", r.PromptIDs}, {"response_ids", r.ResponseIDs}, {"observation_ids", r.ObservationIDs}} {
		for j, id := range col.ids {
			if id < 0 || int(id) >= mc.VocabSize {
				return fmt.Errorf("%s: %w", at("column %q: token %d at index %d outside the model vocabulary [0, %d): tokenizer/model vocab mismatch",
					col.name, id, j, mc.VocabSize), ErrInput)
			}
		}
	}
	if s.cfg.MemoryPass {
		if _, ok := s.targets[r.UID]; !ok {
			return fmt.Errorf("%s: %w", at("uid not in the prompts dataset %s, so its gold answer is unknown", s.in.Prompts), ErrInput)
		}
	}
	return nil
}

func (s *state) shard(rolls *format.Dataset, w *jobs.Work) error {
	// The old and ref passes reuse one working set; the next shard starts afresh.
	defer torch.TrimHeap()
	if err := s.load(); err != nil {
		return err
	}
	file := rolls.Path(w.Shard)
	rows, err := readShard(rolls, w.Shard)
	if err != nil {
		return fmt.Errorf("logprob: %w", err)
	}
	trajs, err := format.Trajectories(rows)
	if err != nil {
		return fmt.Errorf("logprob: %s: %w", file, err)
	}
	var tokens int64
	pairs := make([]qwen2.Pair, len(rows))
	for i := range rows {
		r := &rows[i]
		if err := s.check(file, i, r); err != nil {
			return err
		}
		pairs[i] = turnPair(r)
		tokens += int64(len(r.PromptIDs) + len(r.ResponseIDs))
	}
	out := make([]format.Logprob, len(rows))
	for i, r := range rows {
		out[i] = format.Logprob{UID: r.UID, Sample: r.Sample, Turn: r.Turn}
	}
	sc := qwen2.ScoreConfig{TokenBudget: s.cfg.TokenBudget, Chunk: s.cfg.Chunk, Temperature: s.cfg.Temperature}
	passes := []any{"shard", file, "rows", len(rows)}
	// done records the pass that began at start in the manifest and the log line.
	done := func(name string, start time.Time) float64 {
		sec := time.Since(start).Seconds()
		w.Phase(name, sec)
		passes = append(passes, name+"_s", sec)
		return sec
	}
	start := time.Now()
	old, pCtx, err := s.oldPass(file, rows, pairs, sc)
	if err != nil {
		return err
	}
	for i := range rows {
		if err := finite(old[i]); err != nil {
			return fmt.Errorf("logprob: %s: %s: old_logprobs: %w: %w", file, where(i, &rows[i]), err, ErrNonFinite)
		}
		out[i].OldLogprobs = old[i]
		out[i].RefLogprobs = old[i]
	}
	oldS := done("old_pass", start)
	if s.ref != nil {
		start = time.Now()
		ref, err := s.ref.PrefixLogProbs(pairs, sc)
		if err != nil {
			return fmt.Errorf("logprob: %s: ref pass: %w", file, err)
		}
		for i := range rows {
			if err := finite(ref[i].LogProbs); err != nil {
				return fmt.Errorf("logprob: %s: %s: ref_logprobs: %w: %w", file, where(i, &rows[i]), err, ErrNonFinite)
			}
			out[i].RefLogprobs = ref[i].LogProbs
		}
		done("ref_pass", start)
	}
	if s.cfg.MemoryPass {
		start = time.Now()
		if err := s.memory(file, rows, trajs, pCtx, out); err != nil {
			return err
		}
		passes = append(passes, "memory_per_old", done("memory_pass", start)/oldS)
	}
	// What each pass cost, so a user sees what the memory signal costs on their rollouts
	// (the manifest's timings sum the passes over the shards).
	s.log.Info("shard scored", passes...)
	var opts []format.Option
	if s.cfg.MemoryPass && s.facts {
		opts = append(opts, format.WithOptional("mem_facts", "facts"))
	}
	written, err := format.WriteFile(w.Path, out, opts...)
	if err != nil {
		return fmt.Errorf("logprob: %w", err)
	}
	w.Add(written.Rows, tokens)
	return nil
}

// oldPass scores every response under the old policy and, with PCtx, P_ctx of every
// memory turn (contextPass). pCtx is by row, nil without PCtx.
func (s *state) oldPass(file string, rows []format.Rollout, pairs []qwen2.Pair, sc qwen2.ScoreConfig) (old [][]float32, pCtx []*float32, err error) {
	targets := s.targets
	if !s.cfg.MemoryPass || !s.cfg.PCtx {
		targets = nil
	}
	return contextPass(s.policy, file, rows, pairs, targets, sc)
}

// turnPair is what the old and reference passes score of a rollout turn: its response
// after its context.
func turnPair(r *format.Rollout) qwen2.Pair {
	return qwen2.Pair{Context: qwen2.Tokens(r.PromptIDs), Response: qwen2.Tokens(r.ResponseIDs)}
}

// contextPass is the old pass with P_ctx: every response pairs[i] (row i's) scored under
// m and, for every memory turn, the gold answer after the turn's own context, which the
// response continues too, so both go into one set of prefix trees (qwen2.PrefixTrees)
// and the answer copies cost their own tokens only. The copies are scored at
// temperature 1, the responses at sc's. pCtx is by row, nil for a row without a memory;
// with nil targets there are no copies and pCtx is nil (the trees are PrefixLogProbs').
func contextPass(m *qwen2.Model, file string, rows []format.Rollout, pairs []qwen2.Pair, targets map[string]target, sc qwen2.ScoreConfig) (old [][]float32, pCtx []*float32, err error) {
	all, ctxRow := slices.Clone(pairs), map[int]int{} // pair index → row of its P_ctx
	for i := range rows {
		r := &rows[i]
		if targets == nil || !hasMemory(r) {
			continue
		}
		tg := targets[r.UID]
		if n := len(r.PromptIDs) + len(tg.ids); n > m.Config.MaxPositions {
			return nil, nil, fmt.Errorf("logprob: %s: %s: P_ctx needs %d positions (prompt %d + answer %d), the model has %d: %w",
				file, where(i, r), n, len(r.PromptIDs), len(tg.ids), m.Config.MaxPositions, ErrContext)
		}
		ctxRow[len(all)] = i
		all = append(all, qwen2.Pair{Context: pairs[i].Context, Response: tg.ids})
	}
	trees, members := qwen2.PrefixTrees(all)
	for t, idx := range members {
		for b, i := range idx {
			if row, ok := ctxRow[i]; ok {
				br := &trees[t].Branches[b]
				br.From += targets[rows[row].UID].from // a*'s tokens only
				br.Temperature = 1
			}
		}
	}
	lps, err := m.BranchLogProbs(trees, sc)
	if err != nil {
		return nil, nil, fmt.Errorf("logprob: %s: old pass: %w", file, err)
	}
	old = make([][]float32, len(pairs))
	if targets != nil {
		pCtx = make([]*float32, len(rows))
	}
	for i := range old {
		old[i] = []float32{}
	}
	for t, idx := range members {
		for b, i := range idx {
			if row, ok := ctxRow[i]; ok {
				v := float32(geoMean(lps[t][b]))
				pCtx[row] = &v
			} else {
				old[i] = lps[t][b]
			}
		}
	}
	return old, pCtx, nil
}

// memory fills p_mem, p_full and p_ctx (scored by oldPass), mem_golds and, where the
// question has supporting facts, mem_facts of every memory turn of the shard.
func (s *state) memory(file string, rows []format.Rollout, trajs [][]format.Rollout, pCtx []*float32, out []format.Logprob) error {
	plan, err := planMemory(file, trajs, s.targets, s.policy.Config.MaxPositions, s.cfg.PFull)
	if err != nil {
		return fmt.Errorf("logprob: %w", err)
	}
	sc := qwen2.ScoreConfig{TokenBudget: s.cfg.TokenBudget, Chunk: s.cfg.Chunk}
	pMem, pFull, err := probs(s.policy, plan, len(rows), sc)
	if err != nil {
		return fmt.Errorf("logprob: %s: memory pass: %w", file, err)
	}
	if pCtx == nil {
		pCtx = make([]*float32, len(rows))
	}
	for i := range rows {
		for _, c := range []struct {
			name string
			p    *float32
		}{{"p_mem", pMem[i]}, {"p_full", pFull[i]}, {"p_ctx", pCtx[i]}} {
			if c.p != nil && !isFinite(*c.p) {
				return fmt.Errorf("logprob: %s: %s: %s = %v: %w", file, where(i, &rows[i]), c.name, *c.p, ErrNonFinite)
			}
		}
		out[i].PMem, out[i].PFull, out[i].PCtx = pMem[i], pFull[i], pCtx[i]
		tg := s.targets[rows[i].UID]
		out[i].Objectives, out[i].Facts = int32(len(tg.golds)), int32(len(tg.facts))
		if hasMemory(&rows[i]) {
			n := holds(rows[i].Memory, tg.golds)
			out[i].MemGolds = &n
			if len(tg.facts) > 0 {
				f := format.FactsHeld(rows[i].Memory, tg.facts)
				out[i].MemFacts = &f
			}
		}
	}
	return nil
}

func isFinite(v float32) bool { return !math.IsNaN(float64(v)) && !math.IsInf(float64(v), 0) }

// finite names the first NaN or infinite value of lp.
func finite(lp []float32) error {
	for j, v := range lp {
		if !isFinite(v) {
			return fmt.Errorf("token %d is %v", j, v)
		}
	}
	return nil
}
