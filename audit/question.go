package audit

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/mempo/mempo/format"
)

// QuestionSummary is one question of a group, for the question list.
type QuestionSummary struct {
	UID        string  `json:"uid"`
	Question   string  `json:"question,omitempty"`
	Samples    int     `json:"samples"`
	MeanReward float64 `json:"mean_reward"`
	MaxReward  float32 `json:"max_reward"`
	Invalid    int     `json:"invalid"` // trajectories whose format is not ok
	Answers    string  `json:"-"`       // for text search
}

// QuestionFilter selects questions of a group. Zero values select everything.
type QuestionFilter struct {
	Text      string   // substring of the uid, question or an answer (case-insensitive)
	MinReward *float64 // mean reward at least
	MaxReward *float64 // mean reward at most
	Invalid   bool     // only questions with an invalid-format trajectory
}

// Questions lists the questions of a group from its scores dataset, with question
// text when the prompts dataset is reachable, filtered.
func (s *store) questions(rel string, f QuestionFilter) ([]QuestionSummary, error) {
	g, err := s.group(rel)
	if err != nil {
		return nil, err
	}
	sp := g.Datasets[format.KindScores]
	if sp == "" {
		return nil, fmt.Errorf("group %s: no scores dataset: %w", rel, ErrNotFound)
	}
	dir, err := s.abs(sp)
	if err != nil {
		return nil, err
	}
	scores, err := allRows[format.Score](s, dir)
	if err != nil {
		return nil, err
	}
	prompts, _ := s.prompts(g) // the list works without question text
	by := map[string]*QuestionSummary{}
	var out []*QuestionSummary
	for i := range scores {
		sc := &scores[i]
		q := by[sc.UID]
		if q == nil {
			q = &QuestionSummary{UID: sc.UID, MaxReward: sc.Reward}
			if p := prompts[sc.UID]; p != nil {
				q.Question = p.Question
			}
			by[sc.UID] = q
			out = append(out, q)
		}
		q.Samples++
		q.MeanReward += float64(sc.Reward)
		q.MaxReward = max(q.MaxReward, sc.Reward)
		if !sc.FormatOK {
			q.Invalid++
		}
		q.Answers += "\x00" + sc.Answer
	}
	text := strings.ToLower(f.Text)
	var res []QuestionSummary
	for _, q := range out {
		q.MeanReward /= float64(q.Samples)
		switch {
		case f.MinReward != nil && q.MeanReward < *f.MinReward,
			f.MaxReward != nil && q.MeanReward > *f.MaxReward,
			f.Invalid && q.Invalid == 0,
			text != "" && !strings.Contains(strings.ToLower(q.UID+"\x00"+q.Question+q.Answers), text):
			continue
		}
		res = append(res, *q)
	}
	slices.SortFunc(res, func(a, b QuestionSummary) int { return cmp.Compare(a.UID, b.UID) })
	return res, nil
}

// Turn is one turn of a trajectory with what the later stages computed for it.
type Turn struct {
	Turn        int32    `json:"turn"`
	Memory      string   `json:"memory"`
	Action      string   `json:"action"`
	Query       string   `json:"query"`
	Observation string   `json:"observation"`
	Response    string   `json:"response"`
	Finish      string   `json:"finish"`
	MemStart    int32    `json:"mem_start"`
	MemEnd      int32    `json:"mem_end"`
	Tokens      int      `json:"tokens"`
	PromptLen   int      `json:"prompt_tokens"`
	PMem        *float32 `json:"p_mem,omitempty"`
	PFull       *float32 `json:"p_full,omitempty"`
	PCtx        *float32 `json:"p_ctx,omitempty"`
	MemGolds    *int32   `json:"mem_golds,omitempty"`
	Objectives  int32    `json:"objectives,omitempty"`
	MemReward   *float32 `json:"mem_reward,omitempty"`
	AdvMemory   *float32 `json:"adv_memory,omitempty"`
	AdvOutcome  *float32 `json:"adv_outcome,omitempty"`
	GoldsInMem  []int    `json:"golds_in_memory"` // objectives whose gold (an alias) the memory holds
}

// Trajectory is one sample of a question.
type Trajectory struct {
	Sample int32    `json:"sample"`
	Score  *Outcome `json:"score,omitempty"`
	Turns  []Turn   `json:"turns"`
}

// Outcome is a trajectory's row of the scores dataset, under its column names.
type Outcome struct {
	Answer   string    `json:"answer"`
	EM       []float32 `json:"em"`
	F1       []float32 `json:"f1"`
	FormatOK bool      `json:"format_ok"`
	Reward   float32   `json:"reward"`
	TT       int64     `json:"tt"`
	PT       int32     `json:"pt"`
	Turns    int32     `json:"turns"`
}

// Question is one question of a group: its n trajectories and the gold answers.
type Question struct {
	Group        string       `json:"group"`
	UID          string       `json:"uid"`
	Question     string       `json:"question,omitempty"`
	Golds        [][]string   `json:"golds,omitempty"`
	Trajectories []Trajectory `json:"trajectories"`
	Missing      []string     `json:"missing,omitempty"` // datasets of the group that are absent or unreadable, and why
}

func rolloutKey(r *format.Rollout) (string, int32, int32)     { return r.UID, r.Sample, r.Turn }
func scoreKey(r *format.Score) (string, int32, int32)         { return r.UID, r.Sample, 0 }
func logprobKey(r *format.Logprob) (string, int32, int32)     { return r.UID, r.Sample, r.Turn }
func advantageKey(r *format.Advantage) (string, int32, int32) { return r.UID, r.Sample, r.Turn }

// rollouts is group rel and the rows of its rollouts of uid, at least one.
func (s *store) rollouts(rel, uid string) (*Group, []format.Rollout, error) {
	g, err := s.group(rel)
	if err != nil {
		return nil, nil, err
	}
	rolls, err := uidRows(s, g.Datasets[format.KindRollouts], uid, rolloutKey)
	if err != nil {
		return nil, nil, err
	}
	if len(rolls) == 0 {
		return nil, nil, fmt.Errorf("group %s: no rollouts of uid %q: %w", rel, uid, ErrNotFound)
	}
	return g, rolls, nil
}

// question assembles one question of a group. The rollouts must be readable; scores,
// log-probs and advantages are joined when present, and listed in Missing otherwise.
func (s *store) question(rel, uid string) (*Question, error) {
	g, rolls, err := s.rollouts(rel, uid)
	if err != nil {
		return nil, err
	}
	q := &Question{Group: rel, UID: uid}
	if prompts, err := s.prompts(g); err != nil {
		q.Missing = append(q.Missing, "prompts: "+err.Error())
	} else if p := prompts[uid]; p != nil {
		q.Question, q.Golds = p.Question, p.Golds
	}
	scores := optional(s, g, format.KindScores, uid, scoreKey, q)
	lps := optional(s, g, format.KindLogprobs, uid, logprobKey, q)
	advs := optional(s, g, format.KindAdvantages, uid, advantageKey, q)

	type key struct{ sample, turn int32 }
	lpBy := map[key]*format.Logprob{}
	for i := range lps {
		lpBy[key{lps[i].Sample, lps[i].Turn}] = &lps[i]
	}
	advBy := map[key]*format.Advantage{}
	for i := range advs {
		advBy[key{advs[i].Sample, advs[i].Turn}] = &advs[i]
	}
	scBy := map[int32]*Outcome{}
	for _, sc := range scores {
		scBy[sc.Sample] = &Outcome{Answer: sc.Answer, EM: sc.EM, F1: sc.F1, FormatOK: sc.FormatOK,
			Reward: sc.Reward, TT: sc.TT, PT: sc.PT, Turns: sc.Turns}
	}
	for _, r := range rolls {
		if n := len(q.Trajectories); n == 0 || q.Trajectories[n-1].Sample != r.Sample {
			q.Trajectories = append(q.Trajectories, Trajectory{Sample: r.Sample, Score: scBy[r.Sample]})
		}
		t := Turn{
			Turn: r.Turn, Memory: r.Memory, Action: r.Action, Query: r.Query, Observation: r.Observation,
			Response: r.Response, Finish: r.Finish, MemStart: r.MemStart, MemEnd: r.MemEnd,
			Tokens: len(r.ResponseIDs), PromptLen: len(r.PromptIDs), GoldsInMem: goldsIn(r.Memory, q.Golds),
		}
		if lp := lpBy[key{r.Sample, r.Turn}]; lp != nil {
			t.PMem, t.PFull, t.PCtx, t.MemGolds, t.Objectives = lp.PMem, lp.PFull, lp.PCtx, lp.MemGolds, lp.Objectives
		}
		if a := advBy[key{r.Sample, r.Turn}]; a != nil {
			t.MemReward, t.AdvMemory = a.MemReward, a.AdvMemory
			t.AdvOutcome = &a.AdvOutcome
		}
		tr := &q.Trajectories[len(q.Trajectories)-1]
		tr.Turns = append(tr.Turns, t)
	}
	return q, nil
}

// optional reads uid's rows of the group's dataset of kind k, noting in q.Missing why
// there are none.
func optional[R format.Row](s *store, g *Group, k format.Kind, uid string, key func(*R) (string, int32, int32), q *Question) []R {
	rel := g.Datasets[k]
	if rel == "" {
		q.Missing = append(q.Missing, string(k)+": no dataset in the group")
		return nil
	}
	rows, err := uidRows(s, rel, uid, key)
	if err != nil {
		q.Missing = append(q.Missing, string(k)+": "+err.Error())
	}
	return rows
}

// goldsIn returns the objectives of which some gold alias occurs in the memory text,
// case-insensitively (as the memory pass counts mem_golds).
func goldsIn(memory string, golds [][]string) []int {
	out := []int{}
	if memory == "" {
		return out
	}
	m := strings.ToLower(memory)
	for k, aliases := range golds {
		for _, a := range aliases {
			if a = strings.ToLower(strings.TrimSpace(a)); a != "" && strings.Contains(m, a) {
				out = append(out, k)
				break
			}
		}
	}
	return out
}

// Token is one response token of a turn.
type Token struct {
	ID        int32    `json:"id"`
	Text      string   `json:"text"`                // the token decoded alone ("" without a tokenizer)
	Advantage *float32 `json:"advantage,omitempty"` // the per-token advantage
	Old       *float32 `json:"old,omitempty"`       // old (rollout policy) log-prob
	Ref       *float32 `json:"ref,omitempty"`       // reference log-prob
	Sampling  *float32 `json:"sampling,omitempty"`  // log-prob at sampling time
}

// Tokens is the token view of one turn.
type Tokens struct {
	Group     string  `json:"group"`
	UID       string  `json:"uid"`
	Sample    int32   `json:"sample"`
	Turn      int32   `json:"turn"`
	MemStart  int32   `json:"mem_start"`
	MemEnd    int32   `json:"mem_end"`
	Response  string  `json:"response"`
	Tokenizer string  `json:"tokenizer"`      // path of tokenizer.json, "" when none was found
	Note      string  `json:"note,omitempty"` // what is missing
	Tokens    []Token `json:"tokens"`
}

// tokens assembles the token view of one turn.
func (s *store) tokens(rel, uid string, sample, turn int32) (*Tokens, error) {
	g, rolls, err := s.rollouts(rel, uid)
	if err != nil {
		return nil, err
	}
	var r *format.Rollout
	for i := range rolls {
		if rolls[i].Sample == sample && rolls[i].Turn == turn {
			r = &rolls[i]
		}
	}
	if r == nil {
		return nil, fmt.Errorf("group %s: uid %q has no sample %d turn %d: %w", rel, uid, sample, turn, ErrNotFound)
	}
	t := &Tokens{Group: rel, UID: uid, Sample: sample, Turn: turn, MemStart: r.MemStart, MemEnd: r.MemEnd, Response: r.Response}
	var notes []string
	tok, path, err := s.tokenizer(g)
	if err != nil {
		notes = append(notes, "ids only: "+err.Error())
	}
	t.Tokenizer = relPath(s.root, path)
	var adv, old, ref []float32
	q := &Question{} // collects why a dataset is missing
	for _, a := range optional(s, g, format.KindAdvantages, uid, advantageKey, q) {
		if a.Sample == sample && a.Turn == turn {
			adv = a.Advantages
		}
	}
	for _, l := range optional(s, g, format.KindLogprobs, uid, logprobKey, q) {
		if l.Sample == sample && l.Turn == turn {
			old, ref = l.OldLogprobs, l.RefLogprobs
		}
	}
	notes = append(notes, q.Missing...)
	at := func(xs []float32, i int) *float32 {
		if i < len(xs) {
			return &xs[i]
		}
		return nil
	}
	t.Tokens = make([]Token, len(r.ResponseIDs))
	for i, id := range r.ResponseIDs {
		x := Token{ID: id, Advantage: at(adv, i), Old: at(old, i), Ref: at(ref, i), Sampling: at(r.SamplingLogprobs, i)}
		if tok != nil {
			x.Text = tok.Decode([]int32{id})
		}
		t.Tokens[i] = x
	}
	t.Note = strings.Join(notes, "; ")
	return t, nil
}

// CompareCell is one question in one group of a series.
type CompareCell struct {
	Group        string       `json:"group"`
	Iter         int          `json:"iter"`
	Error        string       `json:"error,omitempty"`
	Trajectories []Trajectory `json:"trajectories,omitempty"`
	MeanReward   *float64     `json:"mean_reward,omitempty"`
}

// Compare is one question across the groups of a series (iter-1..N).
type Compare struct {
	Series   string        `json:"series"`
	UID      string        `json:"uid"`
	Question string        `json:"question,omitempty"`
	Golds    [][]string    `json:"golds,omitempty"`
	Cells    []CompareCell `json:"cells"`
}

// compare assembles one question across the groups of series: one series (its
// iterations; a group without the question, or with an unreadable dataset, is a cell
// with its error), several separated by commas, or "*" for every series (variants side
// by side: only the groups that hold the question, ordered by iteration, then series).
func (s *store) compare(series, uid string) (*Compare, error) {
	o, err := s.overview()
	if err != nil {
		return nil, err
	}
	names := strings.Split(series, ",")
	several := series == "*" || len(names) > 1
	var groups []Group
	for _, g := range o.Groups {
		if series == "*" || slices.Contains(names, g.Series) {
			groups = append(groups, g)
		}
	}
	if several {
		slices.SortStableFunc(groups, func(a, b Group) int { return cmp.Or(cmp.Compare(a.Iter, b.Iter), strings.Compare(a.Series, b.Series)) })
	}
	c := &Compare{Series: series, UID: uid}
	for _, g := range groups {
		cell := CompareCell{Group: g.Path, Iter: g.Iter}
		q, err := s.question(g.Path, uid)
		if several && errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			cell.Error = err.Error()
		} else {
			cell.Trajectories = q.Trajectories
			if c.Question == "" {
				c.Question, c.Golds = q.Question, q.Golds
			}
			var sum float64
			n := 0
			for _, t := range q.Trajectories {
				if t.Score != nil {
					sum += float64(t.Score.Reward)
					n++
				}
			}
			if n > 0 {
				m := sum / float64(n)
				cell.MeanReward = &m
			}
		}
		c.Cells = append(c.Cells, cell)
	}
	if len(c.Cells) == 0 {
		return nil, fmt.Errorf("series %q: no groups hold uid %q: %w", series, uid, ErrNotFound)
	}
	return c, nil
}

// Reward is the outcome of one group, from its scores dataset.
type Reward struct {
	Group        string  `json:"group"`
	Iter         int     `json:"iter"`
	Trajectories int     `json:"trajectories"`
	MeanReward   float64 `json:"mean_reward"`
	FormatOKFrac float64 `json:"format_ok_frac"`
	Error        string  `json:"error,omitempty"`
}

// rewards summarizes the scores of every group of a series; manifests do not hold
// the mean reward, so the scores datasets (one row per trajectory) are read.
func (s *store) rewards(series string) ([]Reward, error) {
	o, err := s.overview()
	if err != nil {
		return nil, err
	}
	var out []Reward
	for _, g := range o.Groups {
		if g.Series != series || g.Datasets[format.KindScores] == "" {
			continue
		}
		r := Reward{Group: g.Path, Iter: g.Iter}
		dir, err := s.abs(g.Datasets[format.KindScores])
		var rows []format.Score
		if err == nil {
			rows, err = allRows[format.Score](s, dir)
		}
		if err != nil {
			r.Error = err.Error()
		}
		for _, sc := range rows {
			r.MeanReward += float64(sc.Reward)
			if sc.FormatOK {
				r.FormatOKFrac++
			}
		}
		if r.Trajectories = len(rows); r.Trajectories > 0 {
			r.MeanReward /= float64(r.Trajectories)
			r.FormatOKFrac /= float64(r.Trajectories)
		}
		out = append(out, r)
	}
	return out, nil
}
