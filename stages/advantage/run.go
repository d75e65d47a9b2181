package advantage

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"path/filepath"
	"slices"

	"github.com/mempo/mempo/agent/protocol"
	"github.com/mempo/mempo/format"
	"github.com/mempo/mempo/internal/stats"
	"github.com/mempo/mempo/jobs"
	"github.com/mempo/mempo/model/bpe"
)

// Stage is the advantage stage's name in cache keys and manifests.
const Stage = "advantage"

// Inputs are the datasets the advantage stage reads. All three share the rollouts'
// shard plan: shard i of scores and logprobs covers the trajectories of rollouts shard i.
type Inputs struct {
	Rollouts string
	Scores   string
	Logprobs string
}

// Run computes the advantages dataset, one shard per rollouts shard, rows sorted by
// (uid, sample, turn), with the summary statistics in the manifest's metrics. It is
// cheap arithmetic over cached datasets, so a new --mem-coef or baseline re-runs only this.
func Run(ctx context.Context, cfg Config, in Inputs, spec jobs.Spec) (*jobs.Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ds, inputs, err := openInputs(in)
	if err != nil {
		return nil, err
	}
	if cfg.MemContentOnly {
		if ds.tags, err = memoryTags(ds.rollouts); err != nil {
			return nil, err
		}
	}
	spec.Stage, spec.Kind, spec.SchemaVersion = Stage, format.KindAdvantages, format.AdvantagesVersion
	spec.Config, spec.Shards, spec.Inputs = cfg, ds.rollouts.Len(), inputs
	spec.Summarize = func(dir string, outputs []format.Output) (map[string]float64, error) {
		return summarize(dir, outputs, ds.logprobs)
	}
	return jobs.Run(ctx, spec, func(ctx context.Context, w *jobs.Work) error {
		return computeShard(cfg, ds, w)
	})
}

type datasets struct {
	rollouts, scores, logprobs *format.Dataset
	// tags finds the memory's content tokens; set only with Config.MemContentOnly.
	tags *memTags
}

// memTags is what locating a memory's content tokens needs: the tokenizer of the policy
// that generated the rollouts (to decode each response token) and the protocol's memory
// tags, both named by the rollouts' manifest.
type memTags struct {
	tok         *bpe.Tokenizer
	open, close string
}

// memoryTags reads the memory tags from the rollouts' resolved config (its "protocol")
// and loads the tokenizer of the policy checkpoint the rollouts name as input "policy".
// The rollouts' digest already pins that policy, so the cache key needs nothing more.
func memoryTags(rollouts *format.Dataset) (*memTags, error) {
	p, ok, err := protocol.FromConfig(rollouts.Manifest.Config)
	switch {
	case err != nil:
		return nil, fmt.Errorf("advantage: --mem-content-only: %s: protocol: %w", rollouts.Dir, err)
	case !ok:
		return nil, fmt.Errorf("advantage: --mem-content-only: %s: the manifest's config has no protocol; rerun the rollout stage: %w",
			rollouts.Dir, ErrInput)
	}
	if p.Memory.Open == "" || p.Memory.Close == "" {
		return nil, fmt.Errorf("advantage: --mem-content-only: %s: protocol %q has no memory tags: %w", rollouts.Dir, p.Name, ErrConfig)
	}
	policy := inputPath(rollouts.Manifest, "policy")
	if policy == "" {
		return nil, fmt.Errorf("advantage: --mem-content-only: %s: the manifest names no policy input: %w", rollouts.Dir, ErrInput)
	}
	tok, err := bpe.Load(filepath.Join(policy, format.TokenizerFile))
	if err != nil {
		return nil, fmt.Errorf("advantage: --mem-content-only needs the tokenizer of the rollouts' policy %s (run from the directory the rollouts were made in): %w", policy, err)
	}
	return &memTags{tok: tok, open: p.Memory.Open, close: p.Memory.Close}, nil
}

// content returns the content span of the memory span of r.
func (m *memTags) content(r *format.Rollout, span Span) (Span, error) {
	pieces := make([]string, len(r.ResponseIDs))
	for i, id := range r.ResponseIDs {
		pieces[i] = m.tok.Decode([]int32{id})
	}
	c, ok := ContentSpan(pieces, span, m.open, m.close)
	if !ok {
		return Span{}, fmt.Errorf("uid %s sample %d turn %d: mem span [%d,%d) does not decode to a %s…%s block: %w",
			r.UID, r.Sample, r.Turn, span.Start, span.End, m.open, m.close, ErrInput)
	}
	return c, nil
}

// openInputs opens the three datasets and checks they belong together: scores and
// logprobs must have been computed from this very rollouts dataset (their manifests name
// its digest) and follow its shard plan.
func openInputs(in Inputs) (datasets, []format.Input, error) {
	var ds datasets
	var inputs []format.Input
	for _, x := range []struct {
		name string
		dir  string
		d    **format.Dataset
	}{{"rollouts", in.Rollouts, &ds.rollouts}, {"scores", in.Scores, &ds.scores}, {"logprobs", in.Logprobs, &ds.logprobs}} {
		d, err := format.OpenDataset(x.dir)
		if err != nil {
			return ds, nil, fmt.Errorf("advantage: %s: %w", x.name, err)
		}
		*x.d = d
		inputs = append(inputs, format.Input{Name: x.name, Path: x.dir, Digest: "dataset:" + d.Manifest.Digest()})
	}
	want := inputs[0].Digest
	for _, d := range []*format.Dataset{ds.scores, ds.logprobs} {
		if got := inputDigest(d.Manifest, "rollouts"); got != "" && got != want {
			return ds, nil, fmt.Errorf("advantage: %s was computed from rollouts %s, not from %s (%s): rerun it on these rollouts: %w",
				d.Dir, got, in.Rollouts, want, ErrInput)
		}
		if d.Len() != ds.rollouts.Len() {
			return ds, nil, fmt.Errorf("advantage: %s has %d shards, rollouts %s has %d: want the rollouts' shard plan: %w",
				d.Dir, d.Len(), in.Rollouts, ds.rollouts.Len(), ErrInput)
		}
	}
	return ds, inputs, nil
}

func inputPath(m *format.Manifest, name string) string {
	for _, in := range m.Inputs {
		if in.Name == name {
			return in.Path
		}
	}
	return ""
}

func inputDigest(m *format.Manifest, name string) string {
	for _, in := range m.Inputs {
		if in.Name == name {
			return in.Digest
		}
	}
	return ""
}

func readShard[R format.Row](d *format.Dataset, i int) ([]R, error) {
	r, err := format.OpenShard[R](d, i)
	if err != nil {
		return nil, err
	}
	return format.ReadAll(r)
}

func computeShard(cfg Config, ds datasets, w *jobs.Work) error {
	rolls, err := readShard[format.Rollout](ds.rollouts, w.Shard)
	if err != nil {
		return err
	}
	scoreRows, err := readShard[format.Score](ds.scores, w.Shard)
	if err != nil {
		return err
	}
	lps, err := readShard[format.Logprob](ds.logprobs, w.Shard)
	if err != nil {
		return err
	}
	turns, err := joinTurns(rolls, lps, ds.logprobs.Path(w.Shard), cfg.MemCoef != 0, cfg.MemBaseline)
	if err != nil {
		return err
	}
	if ds.tags != nil {
		for i := range turns {
			if turns[i].Mem == nil {
				continue
			}
			c, err := ds.tags.content(&rolls[i], *turns[i].Mem)
			if err != nil {
				return fmt.Errorf("%s: row %d: %w", ds.rollouts.Path(w.Shard), i, err)
			}
			turns[i].Content = &c
		}
	}
	scores := make([]Score, len(scoreRows))
	for i, s := range scoreRows {
		if r := float64(s.Reward); math.IsNaN(r) || math.IsInf(r, 0) {
			return fmt.Errorf("%s: row %d (uid %s sample %d): column \"reward\" is %v, want a finite number: %w",
				ds.scores.Path(w.Shard), i, s.UID, s.Sample, s.Reward, ErrInput)
		}
		scores[i] = Score{UID: s.UID, Sample: int(s.Sample), Reward: float64(s.Reward)}
	}
	rows, _, err := Compute(cfg, scores, turns)
	if err != nil {
		return fmt.Errorf("%s: %w", ds.rollouts.Path(w.Shard), err)
	}
	reward := make(map[sampleKey]float32, len(scores))
	for _, s := range scoreRows {
		reward[sampleKey{s.UID, int(s.Sample)}] = s.Reward
	}
	out := make([]format.Advantage, len(rows))
	var tokens int64
	for i, r := range rows {
		out[i] = format.Advantage{UID: r.UID, Sample: int32(r.Sample), Turn: int32(r.Turn),
			Reward: reward[sampleKey{r.UID, r.Sample}], AdvOutcome: float32(r.AdvOutcome), Advantages: r.Advantages}
		if r.HasMem {
			mr, am := float32(r.MemReward), float32(r.AdvMemory)
			out[i].MemReward, out[i].AdvMemory = &mr, &am
		}
		tokens += int64(len(r.Advantages))
	}
	slices.SortFunc(out, func(a, b format.Advantage) int {
		return cmp.Or(cmp.Compare(a.UID, b.UID), cmp.Compare(a.Sample, b.Sample), cmp.Compare(a.Turn, b.Turn))
	})
	written, err := format.WriteFile(w.Path, out)
	if err != nil {
		return err
	}
	w.Add(written.Rows, tokens)
	return nil
}

// probCol is a probability column of a logprobs row and where a Turn keeps it.
type probCol struct {
	name string
	v    *float32
	to   *float64
}

// unscored names the mempo-logprob setting that leaves a column null.
var unscored = map[string]string{"p_mem": "scored with --memory-pass=false", "p_full": "scored with --p-full=false", "p_ctx": "scored without --p-ctx"}

// joinTurns pairs each rollout turn with its log-prob row; both shards list the same
// (uid, sample, turn) keys in the same sorted order. A memory turn needs p_mem and the
// baseline's column (p_full, p_ctx or none) when needMem; without (--mem-coef 0,
// log-probs scored with --memory-pass=false) such a turn counts as one without a memory
// reward.
func joinTurns(rolls []format.Rollout, lps []format.Logprob, lpPath string, needMem bool, b Baseline) ([]Turn, error) {
	if len(rolls) != len(lps) {
		return nil, fmt.Errorf("%s: %d rows for %d rollout turns: %w", lpPath, len(lps), len(rolls), ErrInput)
	}
	turns := make([]Turn, len(rolls))
	for i, r := range rolls {
		l := lps[i]
		if l.UID != r.UID || l.Sample != r.Sample || l.Turn != r.Turn {
			return nil, fmt.Errorf("%s: row %d is uid %s sample %d turn %d, rollouts have uid %s sample %d turn %d: %w",
				lpPath, i, l.UID, l.Sample, l.Turn, r.UID, r.Sample, r.Turn, ErrInput)
		}
		t := Turn{UID: r.UID, Sample: int(r.Sample), Turn: int(r.Turn), ResponseLen: len(r.ResponseIDs)}
		cols := []probCol{{"p_mem", l.PMem, &t.PMem}}
		switch b.Kind {
		case BaselineFull:
			cols = append(cols, probCol{"p_full", l.PFull, &t.PFull})
		case BaselineContext:
			cols = append(cols, probCol{"p_ctx", l.PCtx, &t.PCtx})
		}
		missing := slices.IndexFunc(cols, func(c probCol) bool { return c.v == nil })
		if r.MemEnd != r.MemStart && (needMem || missing < 0) {
			if missing >= 0 {
				c := cols[missing].name
				return nil, fmt.Errorf("%s: row %d (uid %s sample %d turn %d): the turn has a memory but no %s (%s?); --mem-coef 0 needs none: %w",
					lpPath, i, r.UID, r.Sample, r.Turn, c, unscored[c], ErrInput)
			}
			for _, c := range cols {
				if !(*c.v >= 0 && *c.v <= 1) {
					return nil, fmt.Errorf("%s: row %d (uid %s sample %d turn %d): column %q is %v, want a probability in [0,1]: %w",
						lpPath, i, r.UID, r.Sample, r.Turn, c.name, *c.v, ErrInput)
				}
				*c.to = float64(*c.v)
			}
			t.Mem = &Span{Start: int(r.MemStart), End: int(r.MemEnd)}
		}
		turns[i] = t
	}
	return turns, nil
}

// summarize reads the finished advantages back and reports the distribution of each
// component, streaming, so the figures do not depend on which run computed which shard.
// The memory reward is also split by what each memory holds of the gold answers (the
// logprobs' mem_golds, shard i beside advantages shard i), with the AUC of R^M between
// memories holding every answer and those holding none: whether the memory reward, with
// this run's baseline, ranks informative memories first (0.5 is chance).
func summarize(dir string, outputs []format.Output, logprobs *format.Dataset) (map[string]float64, error) {
	var outcome, memReward, memAdv, token moments
	split, byFacts := map[string][]float64{}, map[string][]float64{}
	groups, flat := 0, 0
	for i, o := range outputs {
		r, err := format.OpenFile[format.Advantage](filepath.Join(dir, o.File))
		if err != nil {
			return nil, err
		}
		holds, err := memoryHolds(logprobs, i)
		if err != nil {
			r.Close()
			return nil, err
		}
		var uid string
		var first float32
		same := true
		for r.Next() {
			a := r.Row()
			if a.UID != uid {
				if uid != "" && same {
					flat++
				}
				uid, first, same = a.UID, a.Reward, true
				groups++
			}
			same = same && a.Reward == first
			if a.Turn == 0 {
				outcome.add(float64(a.AdvOutcome))
			}
			if a.MemReward != nil {
				memReward.add(float64(*a.MemReward))
				memAdv.add(float64(*a.AdvMemory))
				h := holds[turnKey{a.UID, a.Sample, a.Turn}]
				if h.names != "" {
					split[h.names] = append(split[h.names], float64(*a.MemReward))
				}
				if h.facts != "" {
					byFacts[h.facts] = append(byFacts[h.facts], float64(*a.MemReward))
				}
			}
			for _, x := range a.Advantages {
				token.add(float64(x))
			}
		}
		if uid != "" && same {
			flat++
		}
		if err := r.Close(); err != nil {
			return nil, err
		}
		if err := r.Err(); err != nil {
			return nil, err
		}
	}
	m := map[string]float64{"groups": float64(groups), "memories": float64(memReward.n)}
	if groups > 0 {
		m["zero_spread_group_frac"] = float64(flat) / float64(groups)
	}
	for name, x := range map[string]moments{"adv_outcome": outcome, "mem_reward": memReward, "adv_memory": memAdv, "advantages": token} {
		x.put(m, name)
	}
	putHolds(m, "", split)
	// By supporting facts, only when the prompts carried them: a run without facts
	// keeps its summary keys.
	if len(byFacts) > 0 {
		putHolds(m, "facts_", byFacts)
	}
	return m, nil
}

// putHolds writes the memory rewards split by what the memories hold: for each class
// memories_<prefix><class> and mem_reward_mean_<prefix><class>, and
// auc_mem_reward_<prefix>all_vs_none.
func putHolds(m map[string]float64, prefix string, split map[string][]float64) {
	for _, h := range format.HoldsClasses {
		m["memories_"+prefix+h] = float64(len(split[h]))
		if xs := split[h]; len(xs) > 0 {
			m["mem_reward_mean_"+prefix+h] = stats.Mean(xs)
		}
	}
	if all, none := split[format.HoldsAll], split[format.HoldsNone]; len(all) > 0 && len(none) > 0 {
		m["auc_mem_reward_"+prefix+"all_vs_none"] = stats.AUC(all, none)
	}
}

type turnKey struct {
	uid          string
	sample, turn int32
}

// held is what a memory holds: its class by gold answer names (format.Logprob.Holds)
// and by supporting facts (HoldsFacts, "" when the question has none).
type held struct{ names, facts string }

// memoryHolds reads shard i of the logprobs and classes each memory turn by the gold
// answers and the supporting facts it holds; log-probs without the memory pass give none.
func memoryHolds(d *format.Dataset, i int) (map[turnKey]held, error) {
	rows, err := readShard[format.Logprob](d, i)
	if err != nil {
		return nil, err
	}
	out := map[turnKey]held{}
	for _, l := range rows {
		if h := (held{l.Holds(), l.HoldsFacts()}); h != (held{}) {
			out[turnKey{l.UID, l.Sample, l.Turn}] = h
		}
	}
	return out, nil
}

// moments accumulates count, mean (Welford), population std, min and max in input order.
type moments struct {
	n        int
	mean, m2 float64
	lo, hi   float64
}

func (s *moments) add(x float64) {
	s.n++
	if s.n == 1 {
		s.lo, s.hi = x, x
	}
	s.lo, s.hi = min(s.lo, x), max(s.hi, x)
	d := x - s.mean
	s.mean += d / float64(s.n)
	s.m2 += d * (x - s.mean)
}

func (s moments) put(m map[string]float64, name string) {
	if s.n == 0 {
		return
	}
	m[name+"_mean"] = s.mean
	m[name+"_std"] = math.Sqrt(s.m2 / float64(s.n))
	m[name+"_min"] = s.lo
	m[name+"_max"] = s.hi
}
