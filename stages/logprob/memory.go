package logprob

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/mempo/mempo/format"
	"github.com/mempo/mempo/model/bpe"
	"github.com/mempo/mempo/model/qwen2"
)

// target is the memory pass's teacher-forced continuation for one question: the probe
// and the answer tag, then a*. Only a*'s tokens are scored (DESIGN.md §7).
type target struct {
	ids   []int64 // tag, then a*
	from  int     // index of a*'s first token in ids
	golds [][]string
	facts [][]string // the question's supporting facts, nil when the prompts have none
}

// answerTarget tokenizes probe + "<answer>" + a*, where a* joins the first alias of
// each objective. The pair is encoded as one string, as the rollout generated it (tags are
// special tokens of our tokenizers, so the split after the tag is exact); should the
// tag's tokens merge with a*'s, the tag and a* are encoded apart instead.
func answerTarget(tok *bpe.Tokenizer, cfg Config, golds [][]string) (target, error) {
	if len(golds) == 0 {
		return target{}, fmt.Errorf("no objectives in the golds")
	}
	first := make([]string, len(golds))
	for k, aliases := range golds {
		if len(aliases) == 0 || aliases[0] == "" {
			return target{}, fmt.Errorf("objective %d has no gold alias", k)
		}
		first[k] = aliases[0]
	}
	answer := joinAnswers(first, cfg.AnswerSeparator)
	tag := tok.Encode(cfg.Probe + cfg.AnswerOpen)
	ids := tok.Encode(cfg.Probe + cfg.AnswerOpen + answer)
	if !slices.Equal(ids[:min(len(tag), len(ids))], tag) {
		ids = append(slices.Clone(tag), tok.Encode(answer)...)
	}
	if len(ids) == len(tag) {
		return target{}, fmt.Errorf("gold answer %q encodes to no tokens", answer)
	}
	return target{ids: qwen2.Tokens(ids), from: len(tag), golds: golds}, nil
}

// holds counts the objectives with a gold alias in memory, case-insensitively (the
// matching task.Retention uses for facts): how much of the answer the memory carries.
func holds(memory string, golds [][]string) int32 {
	m := strings.ToLower(memory)
	var n int32
	for _, aliases := range golds {
		for _, a := range aliases {
			if a != "" && strings.Contains(m, strings.ToLower(a)) {
				n++
				break
			}
		}
	}
	return n
}

func joinAnswers(a []string, sep string) string {
	out := a[0]
	for _, s := range a[1:] {
		out += sep + s
	}
	return out
}

// hasMemory reports whether a turn wrote a memory: its span is not empty. The span
// was checked against the response before.
func hasMemory(r *format.Rollout) bool { return r.MemEnd > r.MemStart }

// History stitches a trajectory's un-pruned history: the turn-0 prompt, then the
// response and the observation of every turn, in order. ends[t] is the length of the
// prefix before turn t: the context the full agent sees at turn t (DESIGN.md §7's
// context_full), after which P_full scores the gold answer.
func History(traj []format.Rollout) (ids []int64, ends []int) {
	ids = qwen2.Tokens(traj[0].PromptIDs)
	ends = make([]int, len(traj))
	for t, r := range traj {
		ends[t] = len(ids)
		ids = append(ids, qwen2.Tokens(r.ResponseIDs)...)
		ids = append(ids, qwen2.Tokens(r.ObservationIDs)...)
	}
	return ids, ends
}

// memoryPlan is the memory pass of one shard: the trees to score and, for every branch,
// the shard row whose probability it gives.
type memoryPlan struct {
	full, mem       []qwen2.Tree
	fullRow, memRow [][]int // [tree][branch] → row index
}

// planMemory lays out the memory pass of a shard's trajectories. trajs are runs of
// rows, in order (format.Trajectories); targets maps uid to its answer target.
//
// P_full: one tree per trajectory whose trunk is the stitched trajectory — turn-0
// prompt, then response and observation of every turn — up to the history of its last
// memory turn, with one answer copy per memory turn t continuing the prefix that ends
// before turn t. P_mem: one trunk per run of trajectories with the same uid and turn-0
// prompt (the samples of a GRPO group), with one branch per memory turn holding the
// memory span and the answer. Either way the shared tokens run once (see qwen2.Tree).
// Without full, the plan holds P_mem's trees only.
func planMemory(file string, trajs [][]format.Rollout, targets map[string]target, maxPos int, full bool) (memoryPlan, error) {
	var p memoryPlan
	var group *qwen2.Tree // the P_mem tree being filled
	var groupRows []int
	var groupUID string
	var groupPrompt []int32
	flush := func() {
		if group != nil && len(group.Branches) > 0 {
			p.mem = append(p.mem, *group)
			p.memRow = append(p.memRow, groupRows)
		}
		group, groupRows = nil, nil
	}
	base := 0
	for _, tr := range trajs {
		tg := targets[tr[0].UID]
		prompt := tr[0].PromptIDs
		if tr[0].UID != groupUID || !slices.Equal(prompt, groupPrompt) {
			flush()
		}
		groupUID, groupPrompt = tr[0].UID, prompt
		trunk, ends := History(tr)
		var hist qwen2.Tree // P_full's
		var fullRows []int
		for t := range tr {
			r, row := &tr[t], base+t
			if hasMemory(r) {
				if n := ends[t] + len(tg.ids); full && n > maxPos {
					return p, fmt.Errorf("%s: %s: P_full needs %d positions (history %d + answer %d), the model has %d: %w",
						file, where(row, r), n, ends[t], len(tg.ids), maxPos, ErrContext)
				}
				hist.Branches = append(hist.Branches, qwen2.Branch{Prefix: ends[t], IDs: tg.ids, From: tg.from})
				fullRows = append(fullRows, row)

				mem := qwen2.Tokens(r.ResponseIDs[r.MemStart:r.MemEnd])
				ids := append(mem, tg.ids...)
				if n := len(prompt) + len(ids); n > maxPos {
					return p, fmt.Errorf("%s: %s: P_mem needs %d positions (prompt %d + memory %d + answer %d), the model has %d: %w",
						file, where(row, r), n, len(prompt), len(mem), len(tg.ids), maxPos, ErrContext)
				}
				if group == nil {
					group = &qwen2.Tree{Trunk: qwen2.Tokens(prompt)}
				}
				group.Branches = append(group.Branches, qwen2.Branch{Prefix: len(prompt), IDs: ids, From: len(mem) + tg.from})
				groupRows = append(groupRows, row)
			}
		}
		if len(hist.Branches) > 0 && full {
			last := hist.Branches[len(hist.Branches)-1].Prefix
			hist.Trunk = trunk[:last:last]
			p.full = append(p.full, hist)
			p.fullRow = append(p.fullRow, fullRows)
		}
		base += len(tr)
	}
	flush()
	return p, nil
}

// geoMean is exp(mean(lp)): the geometric mean of the token probabilities.
func geoMean(lp []float32) float64 {
	s := 0.0
	for _, v := range lp {
		s += float64(v)
	}
	return math.Exp(s / float64(len(lp)))
}

// probs scores the plan's trees, P_full's and P_mem's in one call so that the P_mem
// trunk (the prompt) and the stitched trajectories of its samples share their prompt
// (see qwen2.BranchLogProbs), and returns each memory turn's geometric-mean
// probabilities by shard row (nil for rows without a memory).
func probs(m *qwen2.Model, p memoryPlan, rows int, cfg qwen2.ScoreConfig) (pMem, pFull []*float32, err error) {
	lps, err := m.BranchLogProbs(slices.Concat(p.full, p.mem), cfg)
	if err != nil {
		return nil, nil, err
	}
	pMem, pFull = make([]*float32, rows), make([]*float32, rows)
	fill := func(out []*float32, lps [][][]float32, rows [][]int) {
		for i := range rows {
			for b, row := range rows[i] {
				v := float32(geoMean(lps[i][b]))
				out[row] = &v
			}
		}
	}
	fill(pFull, lps[:len(p.full)], p.fullRow)
	fill(pMem, lps[len(p.full):], p.memRow)
	return pMem, pFull, nil
}
