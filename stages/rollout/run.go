// Package rollout is the rollout stage (DESIGN.md §3, §6): prompts, a policy checkpoint
// and a retriever in, a rollouts dataset out — one row per (uid, sample, turn) holding
// exactly the context ids the policy saw, the ids it generated with their sampling
// log-probs, the memory span and the parsed action.
//
// The shard plan is the prompts sorted by uid in chunks of PromptsPerShard, so a GRPO
// group never spans shards. Within a shard all N·PromptsPerShard trajectories advance
// together, turn by turn: one batched generate call for every running trajectory, then
// one batched retrieval for every pending search (protocol.Run). Each turn samples from
// its own random stream keyed by (seed, uid, sample, turn), so the rows do not depend on
// the shard size, on --shard i/N, or on a resume.
package rollout

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/mempo/mempo/agent/protocol"
	"github.com/mempo/mempo/agent/search"
	"github.com/mempo/mempo/format"
	"github.com/mempo/mempo/jobs"
	"github.com/mempo/mempo/model/bpe"
	"github.com/mempo/mempo/model/chat"
	"github.com/mempo/mempo/model/qwen2"
	"github.com/mempo/mempo/model/torch"
)

// Stage names the rollout stage in keys and manifests.
const Stage = "rollout"

// Run writes the rollouts of cfg and in into spec.Out under the stage runtime. The
// caller sets spec's runtime fields (Out, Seed, Part, Merge, progress, …); Run sets the
// stage's own. The policy is loaded only when a shard has to be computed, so a cache
// hit costs the input digests only.
func Run(ctx context.Context, cfg Config, in Inputs, spec jobs.Spec) (*jobs.Result, error) {
	torch.BoundHeap()
	if cfg.Engine == EngineServer {
		return run(ctx, cfg, in, spec, serverLoader(in.Engine))
	}
	return run(ctx, cfg, in, spec, loadModel)
}

// loader opens the policy's sampler; close releases it.
type loader func(cfg Config, policy string, tok *bpe.Tokenizer) (s sampler, close func(), err error)

func loadModel(cfg Config, policy string, tok *bpe.Tokenizer) (sampler, func(), error) {
	m, err := qwen2.Load(policy, qwen2.Options{Device: cfg.Device, DType: cfg.DType, Attention: cfg.Attention})
	if err != nil {
		return nil, nil, fmt.Errorf("--policy: %w", err)
	}
	sc := cfg.Sampling()
	sc.Stop = stops(cfg.Protocol, tok)
	s := &model{m: m, cfg: sc, maxBatch: cfg.MaxBatch, carry: cfg.Context == protocol.Full, maxTurns: cfg.MaxTurns,
		pasts: map[slot]*qwen2.Past{}}
	return s, s.close, nil
}

func run(ctx context.Context, cfg Config, in Inputs, spec jobs.Spec, load loader) (*jobs.Result, error) {
	if cfg.Protocol == nil {
		cfg.Protocol = protocol.Default()
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &stage{cfg: cfg, in: in, load: load, seed: spec.Seed, log: spec.Log}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	var err error
	if s.prompts, err = format.ReadPrompts(in.Prompts); err != nil {
		return nil, fmt.Errorf("rollout: --prompts: %w", err)
	}
	s.prompts = cfg.selectPrompts(s.prompts)
	var maxPositions int
	if s.tok, maxPositions, err = policyTokenizer(in.Policy); err != nil {
		return nil, fmt.Errorf("rollout: --policy: %w", err)
	}
	tmpl, err := chat.ForCheckpoint(in.Policy, cfg.ChatTemplate, s.log)
	if err != nil {
		return nil, fmt.Errorf("rollout: --policy: %w", err)
	}
	if tmpl != nil {
		s.chat = tmpl
	}
	var skipped []string
	if s.prompts, skipped, err = checkPrompts(cfg, s.chat, s.tok, s.prompts, maxPositions); err != nil {
		return nil, fmt.Errorf("rollout: --prompts %s with --policy %s: %w", in.Prompts, in.Policy, err)
	}
	if len(skipped) > 0 {
		s.log.Warn("skipped prompts longer than the model's context", "skipped", len(skipped), "first", skipped[:min(len(skipped), 5)])
	}
	if len(s.prompts) == 0 {
		return nil, fmt.Errorf("rollout: --prompts %s: every selected prompt is longer than the model's context: %w", in.Prompts, ErrTooLong)
	}
	policy, err := jobs.CheckpointInput("policy", in.Policy)
	if err != nil {
		return nil, fmt.Errorf("rollout: --policy: %w", err)
	}
	s.digest = jobs.DigestOf(policy)
	ret, closer, retIn, err := openRetriever(cfg, in)
	if err != nil {
		return nil, fmt.Errorf("rollout: %w", err)
	}
	defer closer.Close()
	s.ret = search.Documents{R: ret, TopK: cfg.RetrievalTopK}
	defer s.close()

	prompts, err := jobs.DatasetInput("prompts", in.Prompts)
	if err != nil {
		return nil, fmt.Errorf("rollout: %w", err)
	}
	spec.Inputs = []format.Input{prompts, policy, retIn}
	spec.Stage, spec.Kind, spec.SchemaVersion = Stage, format.KindRollouts, format.RolloutsVersion
	spec.Config = cfg
	spec.Shards = (len(s.prompts) + cfg.PromptsPerShard - 1) / cfg.PromptsPerShard
	spec.Summarize = func(dir string, outputs []format.Output) (map[string]float64, error) {
		m, err := summarize(dir, outputs)
		if err == nil && cfg.SkipLongPrompts {
			m["prompts_skipped_long"] = float64(len(skipped))
		}
		return m, err
	}
	return jobs.Run(ctx, spec, s.shard)
}

// policyTokenizer loads the checkpoint's tokenizer and checks that the model has an
// embedding row for each of its ids, before any work. It also returns the model's
// max_position_embeddings, which bounds every context.
func policyTokenizer(dir string) (*bpe.Tokenizer, int, error) {
	tok, err := bpe.Load(filepath.Join(dir, format.TokenizerFile))
	if err != nil {
		return nil, 0, err
	}
	mc, err := qwen2.ReadConfig(filepath.Join(dir, qwen2.ConfigFile))
	if err != nil {
		return nil, 0, err
	}
	if err := mc.CheckTokenizer(tok, bpe.ImStart, bpe.ImEnd); err != nil {
		return nil, 0, fmt.Errorf("%s: %w", dir, err)
	}
	return tok, mc.MaxPositions, nil
}

// checkPrompts refuses, before any work, a prompt whose first context already fills
// the model's positions. Such a prompt leaves no room for one generated token: its turns
// would be recorded empty and the log-prob stage, which scores prompt and response
// together, would fail on the whole dataset. (A later turn of the full context policy
// can still outgrow the model; sample records that turn as truncated.) With
// cfg.SkipLongPrompts it drops them instead: it returns the prompts kept and the uids
// of those dropped.
func checkPrompts(cfg Config, c protocol.Chat, tok *bpe.Tokenizer, prompts []format.Prompt, maxPositions int) (kept []format.Prompt, skipped []string, err error) {
	for _, p := range prompts {
		e, err := newEpisode(cfg, c, tok, p)
		if err != nil {
			return nil, nil, fmt.Errorf("uid %s: %w", p.UID, err)
		}
		ctx, err := e.Context()
		if err != nil {
			return nil, nil, fmt.Errorf("uid %s: %w", p.UID, err)
		}
		switch n := ctx.Len(); {
		case n < maxPositions:
			kept = append(kept, p)
		case cfg.SkipLongPrompts:
			skipped = append(skipped, p.UID)
		default:
			return nil, nil, fmt.Errorf("uid %s: the first turn's context is %d tokens, the policy's max_position_embeddings is %d, which leaves no room for a response (shorten the question, drop the prompt, or pass --skip-long-prompts): %w",
				p.UID, n, maxPositions, ErrTooLong)
		}
	}
	return kept, skipped, nil
}

// stage is one Run's state shared by its shards. The policy is opened by the first
// shard that runs; shards run one at a time.
type stage struct {
	cfg     Config
	in      Inputs
	load    loader
	seed    int64
	log     *slog.Logger
	prompts []format.Prompt
	tok     *bpe.Tokenizer
	chat    protocol.Chat // the policy's chat template; nil: the protocol's glue
	digest  string
	ret     search.Documents

	once    sync.Once
	openErr error
	gen     sampler
	release func()
}

// open probes the retriever, then loads the policy, once. The probe comes first so an
// unreachable server fails the stage before a large model is loaded and before any
// episode runs: a random or early policy may search rarely, and a stage that fails
// only at its first search would fail late and by chance.
func (s *stage) open(ctx context.Context) error {
	s.once.Do(func() {
		if _, err := s.ret.Retrieve(ctx, []string{s.prompts[0].Question}); err != nil {
			s.openErr = fmt.Errorf("retriever check before the first turn (start the server or fix --retriever-url/--index): %w", err)
			return
		}
		s.gen, s.release, s.openErr = s.load(s.cfg, s.in.Policy, s.tok)
	})
	return s.openErr
}

func (s *stage) close() {
	if s.release != nil {
		s.release()
	}
}

// shard runs every trajectory of plan shard w.Shard to the end and writes its rows. A
// retrieval or completions server that stopped answering is no finding about the
// inputs: the error is marked transient, so the finished shards stay for the rerun.
func (s *stage) shard(ctx context.Context, w *jobs.Work) (err error) {
	defer func() {
		if errors.Is(err, search.ErrUnreachable) || errors.Is(err, ErrEngine) {
			err = fmt.Errorf("%w (%w)", err, jobs.ErrTransient)
		}
	}()
	defer torch.TrimHeap() // what this shard's batches needed does not stay resident
	if err := s.open(ctx); err != nil {
		return err
	}
	lo := w.Shard * s.cfg.PromptsPerShard
	prompts := s.prompts[lo:min(lo+s.cfg.PromptsPerShard, len(s.prompts))]
	start := time.Now()
	eps, slots, err := s.episodes(prompts)
	if err != nil {
		return err
	}
	var generated int64
	gen := &episodes{s: s.gen, seed: s.seed, slots: slots, tokens: func(n int64) {
		generated += n
		w.Add(0, n)
	}}
	// The manifest's timings split the shard into decoding and retrieval.
	timedGen := timedGenerator{gen, func(sec float64) { w.Phase("generate", sec) }}
	timedRet := timedRetriever{s.ret, func(sec float64) { w.Phase("retrieve", sec) }}
	if err := protocol.Run(ctx, eps, timedGen, timedRet); err != nil {
		return fmt.Errorf("uids %s..%s: %w", prompts[0].UID, prompts[len(prompts)-1].UID, err)
	}
	rows := s.rows(eps, slots)
	if err := writeRows(w.Path, rows); err != nil {
		return err
	}
	w.Add(int64(len(rows)), 0)
	secs := time.Since(start).Seconds()
	s.log.Info("shard done", "shard", w.Shard, "prompts", len(prompts), "trajectories", len(eps), "turns", len(rows),
		"trajectories_per_s", float64(len(eps))/secs, "tokens_per_s", float64(generated)/secs)
	return nil
}

// timedGenerator passes each Generate call's seconds to add.
type timedGenerator struct {
	protocol.Generator
	add func(seconds float64)
}

func (t timedGenerator) Generate(ctx context.Context, contexts [][]int32, eps []*protocol.Episode) ([]protocol.Generation, error) {
	defer since(time.Now(), t.add)
	return t.Generator.Generate(ctx, contexts, eps)
}

// timedRetriever passes each Retrieve call's seconds to add.
type timedRetriever struct {
	protocol.Retriever
	add func(seconds float64)
}

func (t timedRetriever) Retrieve(ctx context.Context, queries []string) ([][]protocol.Doc, error) {
	defer since(time.Now(), t.add)
	return t.Retriever.Retrieve(ctx, queries)
}

func since(start time.Time, add func(seconds float64)) { add(time.Since(start).Seconds()) }

// newEpisode starts an episode of prompt p: from its source's own messages when it has
// them (format.Prompt.User), else the protocol's templates around its question.
func newEpisode(cfg Config, c protocol.Chat, tok protocol.Tokenizer, p format.Prompt) (*protocol.Episode, error) {
	if p.User != "" {
		return protocol.NewEpisodeMessages(cfg.Protocol, c, tok, cfg.Episode(), p.System, p.User)
	}
	return protocol.NewEpisode(cfg.Protocol, c, tok, cfg.Episode(), p.Question, max(len(p.Golds), 1))
}

// episodes starts N episodes per prompt, in (uid, sample) order.
func (s *stage) episodes(prompts []format.Prompt) ([]*protocol.Episode, map[*protocol.Episode]slot, error) {
	eps := make([]*protocol.Episode, 0, len(prompts)*s.cfg.N)
	slots := make(map[*protocol.Episode]slot, cap(eps))
	for _, p := range prompts {
		for i := range s.cfg.N {
			e, err := newEpisode(s.cfg, s.chat, s.tok, p)
			if err != nil {
				return nil, nil, fmt.Errorf("uid %s: %w", p.UID, err)
			}
			eps = append(eps, e)
			slots[e] = slot{uid: p.UID, sample: i}
		}
	}
	return eps, slots, nil
}

// rows turns the finished episodes into rollout rows, one per turn, in (uid, sample,
// turn) order: the order the episodes were created in.
func (s *stage) rows(eps []*protocol.Episode, slots map[*protocol.Episode]slot) []format.Rollout {
	var rows []format.Rollout
	for _, e := range eps {
		sl := slots[e]
		for _, r := range e.Records() {
			lp := r.Logprobs
			if lp == nil {
				lp = []float32{}
			}
			rows = append(rows, format.Rollout{
				UID: sl.uid, Sample: int32(sl.sample), Turn: int32(r.Turn),
				PromptIDs: r.Context.IDs(), ResponseIDs: r.Response, SamplingLogprobs: lp,
				MemStart: int32(r.Parsed.MemTokens.Start), MemEnd: int32(r.Parsed.MemTokens.End),
				Response: text(s.tok.Decode(r.Response)), Memory: text(r.Parsed.Memory),
				Action: string(r.Parsed.Kind), Query: text(r.Parsed.Arg),
				Observation: text(r.Observation), ObservationIDs: r.ObservationIDs,
				Finish: string(r.Finish), PolicyDigest: s.digest,
			})
		}
	}
	return rows
}

// text makes decoded model output valid UTF-8, as Arrow string columns must be: a
// response cut off by the token limit can end inside a character, and a small model can
// emit any byte sequence. Each run of invalid bytes becomes U+FFFD (HF's decode with
// errors="replace" writes one per byte); the ids keep the exact output.
func text(s string) string { return strings.ToValidUTF8(s, "\uFFFD") }

func writeRows(path string, rows []format.Rollout) error {
	f, err := format.Create[format.Rollout](path)
	if err != nil {
		return err
	}
	if err := f.Write(rows...); err != nil {
		f.Abort()
		return err
	}
	_, err = f.Close()
	return err
}
