// Package advantage turns scored trajectories and memory probabilities into MemPO's
// per-token advantages (DESIGN.md §7, arXiv 2603.00680): the GRPO outcome advantage of each
// trajectory, the memory reward R^M = P_mem − b of each turn's <mem>, its advantage
// normalised over a pool of memories, and their sum on the <mem> span. It also holds the
// host-side PPO and KL formulas (ppo.go) that the tensor update is tested against.
//
// Everything is pure Go over plain structs, in float64, with a fixed order of summation; the
// stage loop that reads scores and logprobs and writes the advantages dataset lives elsewhere.
package advantage

import (
	"cmp"
	"fmt"
	"math"
	"slices"
)

// Score is the outcome of one trajectory: a row of the scores dataset.
type Score struct {
	UID    string
	Sample int
	Reward float64
}

// Turn is what the advantage needs from one (prompt, sample, turn) row of the rollouts and
// logprobs datasets.
type Turn struct {
	UID    string
	Sample int
	Turn   int
	// ResponseLen is the number of generated tokens of the turn.
	ResponseLen int
	// Mem is the <mem>…</mem> span in response tokens, tags included; nil when the turn
	// wrote no memory. PMem and the baseline's PFull or PCtx are read only when Mem is set.
	Mem *Span
	// Content is the part of Mem between its tags: the tokens that lie wholly after the
	// open tag and before the close tag (ContentSpan). Read only with
	// Config.MemContentOnly, where nil or empty means no token carries the memory
	// advantage (the memory still counts in its pool).
	Content *Span
	PMem    float64
	PFull   float64
	PCtx    float64
}

// Row is one row of the advantages dataset.
type Row struct {
	UID        string
	Sample     int
	Turn       int
	AdvOutcome float64
	// HasMem says whether MemReward and AdvMemory apply; both are 0 when it is false.
	HasMem     bool
	MemReward  float64
	AdvMemory  float64
	Advantages []float32
}

type sampleKey struct {
	uid    string
	sample int
}

// memRef locates one memory: its index in turns and its reward.
type memRef struct {
	sample, turn, row int
	reward            float64
}

// Compute validates scores and turns and returns one Row per turn, in the order of turns,
// with a summary. The outcome group of a question is its n trajectories (one Score each,
// samples 0..n−1); memory pools are formed per question or per (question, turn index) and
// ordered by (sample, turn), so the result does not depend on the input order.
func Compute(cfg Config, scores []Score, turns []Turn) ([]Row, Summary, error) {
	if err := cfg.Validate(); err != nil {
		return nil, Summary{}, err
	}
	groups, err := groupScores(scores)
	if err != nil {
		return nil, Summary{}, err
	}
	if err := checkTurns(turns, groups); err != nil {
		return nil, Summary{}, err
	}

	var sum Summary
	outcome := make(map[sampleKey]float64, len(scores))
	uids := make([]string, 0, len(groups))
	for uid := range groups {
		uids = append(uids, uid)
	}
	slices.Sort(uids)
	var outcomes []float64
	for _, uid := range uids {
		rewards := groups[uid]
		adv, zero := GRPO(rewards, cfg.NoStdNorm)
		sum.Groups++
		if zero {
			sum.ZeroSpreadGroups++
		}
		for s, a := range adv {
			outcome[sampleKey{uid, s}] = a
		}
		outcomes = append(outcomes, adv...)
	}

	rows := make([]Row, len(turns))
	pools := make(map[poolKey][]memRef)
	for i, t := range turns {
		rows[i] = Row{UID: t.UID, Sample: t.Sample, Turn: t.Turn, AdvOutcome: outcome[sampleKey{t.UID, t.Sample}]}
		if t.Mem == nil {
			continue
		}
		r := t.PMem - cfg.MemBaseline.of(t)
		rows[i].HasMem, rows[i].MemReward = true, r
		k := poolKey{uid: t.UID, turn: -1}
		if cfg.MemPool == PoolTurn {
			k.turn = t.Turn
		}
		pools[k] = append(pools[k], memRef{sample: t.Sample, turn: t.Turn, row: i, reward: r})
	}
	keys := make([]poolKey, 0, len(pools))
	for k := range pools {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b poolKey) int {
		return cmp.Or(cmp.Compare(a.uid, b.uid), cmp.Compare(a.turn, b.turn))
	})
	var memRewards, memAdvs []float64
	for _, k := range keys {
		refs := pools[k]
		slices.SortFunc(refs, func(a, b memRef) int {
			return cmp.Or(cmp.Compare(a.sample, b.sample), cmp.Compare(a.turn, b.turn))
		})
		rewards := make([]float64, len(refs))
		for j, m := range refs {
			rewards[j] = m.reward
		}
		adv, degenerate := MemoryAdvantage(rewards)
		sum.Pools++
		if degenerate {
			sum.ZeroSpreadPools++
		}
		for j, m := range refs {
			rows[m.row].AdvMemory = adv[j]
		}
		memRewards = append(memRewards, rewards...)
		memAdvs = append(memAdvs, adv...)
	}

	var tokens []float64
	for i, t := range turns {
		row := &rows[i]
		span := t.Mem
		if cfg.MemContentOnly {
			span = t.Content
			if span != nil && span.End <= span.Start {
				span = nil
			}
		}
		row.Advantages = TokenAdvantages(t.ResponseLen, row.AdvOutcome, span, cfg.MemCoef, row.AdvMemory)
		for _, a := range row.Advantages {
			tokens = append(tokens, float64(a))
		}
	}
	sum.Memories = len(memRewards)
	sum.Outcome = statsOf(outcomes)
	sum.MemReward = statsOf(memRewards)
	sum.MemAdvantage = statsOf(memAdvs)
	sum.Token = statsOf(tokens)
	sum.ZeroSpreadGroupFrac = frac(sum.ZeroSpreadGroups, sum.Groups)
	sum.ZeroSpreadPoolFrac = frac(sum.ZeroSpreadPools, sum.Pools)
	return rows, sum, nil
}

// poolKey names a memory pool; turn is −1 when pooling over the whole question.
type poolKey struct {
	uid  string
	turn int
}

// groupScores checks the scores and returns each question's rewards indexed by sample.
func groupScores(scores []Score) (map[string][]float64, error) {
	seen := make(map[sampleKey]bool, len(scores))
	count := make(map[string]int)
	for i, s := range scores {
		if math.IsNaN(s.Reward) || math.IsInf(s.Reward, 0) {
			return nil, fmt.Errorf("score %d: uid %s sample %d: reward %v, want a finite number: %w",
				i, s.UID, s.Sample, s.Reward, ErrInput)
		}
		k := sampleKey{s.UID, s.Sample}
		if seen[k] {
			return nil, fmt.Errorf("score %d: uid %s sample %d: duplicate row: %w", i, s.UID, s.Sample, ErrInput)
		}
		seen[k] = true
		count[s.UID]++
	}
	groups := make(map[string][]float64, len(count))
	for uid, n := range count {
		groups[uid] = make([]float64, n)
	}
	for _, s := range scores {
		g := groups[s.UID]
		if s.Sample < 0 || s.Sample >= len(g) {
			return nil, fmt.Errorf("uid %s: sample %d in a group of %d rows, want samples 0..%d (missing samples?): %w",
				s.UID, s.Sample, len(g), len(g)-1, ErrInput)
		}
		g[s.Sample] = s.Reward
	}
	return groups, nil
}

// checkTurns checks each turn against its trajectory and its own span and probabilities.
func checkTurns(turns []Turn, groups map[string][]float64) error {
	type turnKey struct {
		sampleKey
		turn int
	}
	seen := make(map[turnKey]bool, len(turns))
	has := make(map[sampleKey]bool)
	for i, t := range turns {
		where := fmt.Sprintf("turn row %d: uid %s sample %d turn %d", i, t.UID, t.Sample, t.Turn)
		g, ok := groups[t.UID]
		if !ok || t.Sample < 0 || t.Sample >= len(g) {
			return fmt.Errorf("%s: no score for this trajectory: %w", where, ErrInput)
		}
		if t.Turn < 0 || t.ResponseLen < 0 {
			return fmt.Errorf("%s: response length %d, want non-negative turn and length: %w", where, t.ResponseLen, ErrInput)
		}
		k := turnKey{sampleKey{t.UID, t.Sample}, t.Turn}
		if seen[k] {
			return fmt.Errorf("%s: duplicate row: %w", where, ErrInput)
		}
		seen[k] = true
		has[sampleKey{t.UID, t.Sample}] = true
		if t.Mem == nil {
			continue
		}
		if t.Mem.Start < 0 || t.Mem.End <= t.Mem.Start || t.Mem.End > t.ResponseLen {
			return fmt.Errorf("%s: mem span [%d,%d) outside the response of %d tokens: %w",
				where, t.Mem.Start, t.Mem.End, t.ResponseLen, ErrInput)
		}
		if c := t.Content; c != nil && c.End > c.Start && (c.Start < t.Mem.Start || c.End > t.Mem.End) {
			return fmt.Errorf("%s: memory content [%d,%d) outside the mem span [%d,%d): %w",
				where, c.Start, c.End, t.Mem.Start, t.Mem.End, ErrInput)
		}
		for _, p := range []struct {
			name string
			v    float64
		}{{"p_mem", t.PMem}, {"p_full", t.PFull}, {"p_ctx", t.PCtx}} {
			if !(p.v >= 0 && p.v <= 1) {
				return fmt.Errorf("%s: %s %v, want a probability in [0,1]: %w", where, p.name, p.v, ErrInput)
			}
		}
	}
	uids := make([]string, 0, len(groups))
	for uid := range groups {
		uids = append(uids, uid)
	}
	slices.Sort(uids) // the first missing trajectory reported is the same on every run
	for _, uid := range uids {
		for s := range groups[uid] {
			if !has[sampleKey{uid, s}] {
				return fmt.Errorf("uid %s sample %d: scored but has no turn rows: %w", uid, s, ErrInput)
			}
		}
	}
	return nil
}
