package format

import "strings"

// Schema versions, one per kind. Bump a kind's version whenever its columns change
// meaning, type or name; readers refuse any other version instead of guessing.
const (
	// PromptsVersion 2 adds system and user: a question's own first messages as its
	// source wrote them. The optional facts column needs no bump (see WithOptional).
	PromptsVersion = 2
	// RolloutsVersion 2 records observation_ids for every observation; version 1 left
	// them empty, so the memory pass scored P_full on histories without the retrieved
	// documents.
	RolloutsVersion = 2
	ScoresVersion   = 1
	// LogprobsVersion 2 adds mem_golds and objectives: what each memory holds; 3 adds
	// p_ctx, the context baseline of the memory reward.
	// The optional mem_facts and facts columns need no bump.
	LogprobsVersion   = 3
	AdvantagesVersion = 1
	MetricsVersion    = 1
)

// retired gives, for a schema version retired because its rows were wrong, the reason
// and the fix; readers refuse such a dataset with it.
var retired = map[Kind]map[int]string{
	KindRollouts: {1: "written before rollouts recorded observation_ids, so the memory pass would score P_full " +
		"on histories without the retrieved documents; re-run the rollout stage (mempo-rollout --force) to rewrite it"},
}

// Row is the set of typed rows a shard holds, one Go type per kind. Each field's
// `arrow:"name"` tag is the Parquet column name; the column type follows from the Go
// type (see codec.go). Empty lists read back as nil slices.
type Row interface {
	Prompt | Rollout | Score | Logprob | Advantage | Metric
}

// Prompt is one question of a prompts shard. A MEM1-style composed prompt carries K
// objectives: Question joins them with "; " and Golds holds one alias list per
// objective, in the same order.
type Prompt struct {
	UID         string     `arrow:"uid"`          // stable hash of data_source, split and source indices
	DataSource  string     `arrow:"data_source"`  // e.g. "nq", "hotpotqa", "synthetic"
	Split       string     `arrow:"split"`        // "train", "test", …
	SourceIndex []int64    `arrow:"source_index"` // row indices in the source file, one per objective
	Question    string     `arrow:"question"`
	Golds       [][]string `arrow:"golds"` // golds[k] = accepted aliases of objective k
	// System and User are the question's first messages as its source wrote them: an
	// imported chat prompt's system message and the user message that wraps the
	// question in the source's instructions. An empty User renders the protocol's system
	// message and user template around Question instead (always for K > 1).
	System string `arrow:"system"`
	User   string `arrow:"user"`
	// Facts are the question's supporting facts, when its source knows them: what a
	// memory must hold to answer every objective. Each fact is a list of phrases that
	// all appear in a memory holding it (FactHeld): the embedded task's [subject,
	// value], an imported HotpotQA supporting sentence as [sentence]. An optional
	// column: written only by datasets that have facts, nil when read from others.
	Facts [][]string `arrow:"facts,optional"`
}

// FactHeld reports whether memory holds fact: every phrase of the fact appears in the
// memory, compared case-insensitively as mem_golds compares answers, with runs of
// white space as one space. A fact with no non-blank phrase is never held.
func FactHeld(memory string, fact []string) bool {
	m := foldSpace(memory)
	held := false
	for _, p := range fact {
		p = foldSpace(p)
		if p == "" {
			continue
		}
		if !strings.Contains(m, p) {
			return false
		}
		held = true
	}
	return held
}

// FactsHeld counts the facts memory holds (FactHeld).
func FactsHeld(memory string, facts [][]string) int32 {
	var n int32
	for _, f := range facts {
		if FactHeld(memory, f) {
			n++
		}
	}
	return n
}

func foldSpace(s string) string { return strings.ToLower(strings.Join(strings.Fields(s), " ")) }

// Rollout is one turn of one sampled trajectory: exactly what the policy saw
// (PromptIDs, the pruned context) and produced (ResponseIDs).
type Rollout struct {
	UID              string    `arrow:"uid"`
	Sample           int32     `arrow:"sample"` // 0..n-1 within the GRPO group
	Turn             int32     `arrow:"turn"`   // 0-based
	PromptIDs        []int32   `arrow:"prompt_ids"`
	ResponseIDs      []int32   `arrow:"response_ids"`
	SamplingLogprobs []float32 `arrow:"sampling_logprobs"` // one per response token
	// MemStart and MemEnd are the [start, end) token span of <mem>…</mem> in
	// ResponseIDs, tags included; MemStart == MemEnd means the turn wrote no memory.
	MemStart    int32  `arrow:"mem_start"`
	MemEnd      int32  `arrow:"mem_end"`
	Response    string `arrow:"response"` // decoded ResponseIDs, for auditing
	Memory      string `arrow:"memory"`   // text inside <mem>, "" when none
	Action      string `arrow:"action"`   // "search", "answer" or "invalid"
	Query       string `arrow:"query"`    // search query or answer text
	Observation string `arrow:"observation"`
	// ObservationIDs is Observation as encoded once at rollout time, exactly as later
	// contexts include it; the memory pass stitches the un-pruned history from these.
	ObservationIDs []int32 `arrow:"observation_ids"`
	Finish         string  `arrow:"finish"` // "stop", "length" or "max_turns"
	PolicyDigest   string  `arrow:"policy_digest"`
}

// Score is the outcome of one trajectory (prompt, sample).
type Score struct {
	UID      string    `arrow:"uid"`
	Sample   int32     `arrow:"sample"`
	Answer   string    `arrow:"answer"` // text of the last <answer>
	EM       []float32 `arrow:"em"`     // per objective, 0 or 1
	F1       []float32 `arrow:"f1"`     // per objective
	FormatOK bool      `arrow:"format_ok"`
	Reward   float32   `arrow:"reward"`
	TT       int64     `arrow:"tt"`    // total tokens over all calls
	PT       int32     `arrow:"pt"`    // peak single-call context
	Turns    int32     `arrow:"turns"` // turns taken
}

// Logprob holds the per-token log-probabilities of one turn under the old (rollout)
// and reference policies, and the memory pass probabilities when the turn has a memory.
type Logprob struct {
	UID         string    `arrow:"uid"`
	Sample      int32     `arrow:"sample"`
	Turn        int32     `arrow:"turn"`
	OldLogprobs []float32 `arrow:"old_logprobs"`
	RefLogprobs []float32 `arrow:"ref_logprobs"`
	PMem        *float32  `arrow:"p_mem"`  // nil when the turn wrote no memory
	PFull       *float32  `arrow:"p_full"` // nil when the turn wrote no memory or P_full was not scored
	// PCtx is the gold answer's probability after the pruned context the turn was
	// generated from (its prompt_ids): the context baseline of the memory reward. nil
	// when the turn wrote no memory or the stage ran without it (mempo-logprob --p-ctx).
	PCtx *float32 `arrow:"p_ctx"`
	// MemGolds counts the objectives whose gold answer (any alias, case-insensitive)
	// the memory text holds, of Objectives; nil when the turn wrote no memory or the
	// memory pass did not run. It lets a user see whether P_mem measures what MemPO
	// claims: memories holding every answer should score higher than those holding none.
	MemGolds   *int32 `arrow:"mem_golds"`
	Objectives int32  `arrow:"objectives"` // K of the question; 0 without the memory pass
	// MemFacts counts the question's supporting facts (Prompt.Facts) the memory holds
	// (FactHeld), of Facts: the audit by facts beside the audit by answer names, since a
	// memory can name an answer without the chain that leads to it. nil, and Facts 0,
	// when the question has no facts, the turn wrote no memory or the memory pass did not
	// run. Optional columns: written only when the prompts carry facts.
	MemFacts *int32 `arrow:"mem_facts,optional"`
	Facts    int32  `arrow:"facts,optional"`
}

// The classes of a memory by the gold answers it holds (Logprob.Holds), in the order
// summaries report them.
const (
	HoldsAll  = "all"  // every objective's
	HoldsSome = "some" // some objectives'
	HoldsNone = "none" // no objective's
)

// HoldsClasses lists the classes of Logprob.Holds.
var HoldsClasses = []string{HoldsAll, HoldsSome, HoldsNone}

// Holds classes the turn's memory by the gold answers it holds: HoldsAll, HoldsSome or
// HoldsNone; "" when MemGolds is unknown.
func (l *Logprob) Holds() string {
	switch {
	case l.MemGolds == nil:
		return ""
	case *l.MemGolds == 0:
		return HoldsNone
	case *l.MemGolds >= l.Objectives:
		return HoldsAll
	}
	return HoldsSome
}

// HoldsFacts classes the turn's memory by the supporting facts it holds: HoldsAll,
// HoldsSome or HoldsNone; "" when MemFacts is unknown (no facts, or no memory).
func (l *Logprob) HoldsFacts() string {
	switch {
	case l.MemFacts == nil || l.Facts <= 0:
		return ""
	case *l.MemFacts == 0:
		return HoldsNone
	case *l.MemFacts >= l.Facts:
		return HoldsAll
	}
	return HoldsSome
}

// Advantage holds the advantages of one turn (DESIGN.md §7).
type Advantage struct {
	UID        string    `arrow:"uid"`
	Sample     int32     `arrow:"sample"`
	Turn       int32     `arrow:"turn"`
	Reward     float32   `arrow:"reward"` // outcome reward R^T of the trajectory
	AdvOutcome float32   `arrow:"adv_outcome"`
	MemReward  *float32  `arrow:"mem_reward"` // R^M, nil when the turn wrote no memory
	AdvMemory  *float32  `arrow:"adv_memory"` // A^M, nil when the turn wrote no memory
	Advantages []float32 `arrow:"advantages"` // one per response token
}

// Metric is one scalar a stage measured at a step (loss, kl, tokens/s, …).
type Metric struct {
	Stage string  `arrow:"stage"`
	Iter  int32   `arrow:"iter"`
	Step  int64   `arrow:"step"`
	Name  string  `arrow:"name"`
	Value float64 `arrow:"value"`
}
