package audit

import (
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/mempo/mempo/agent/protocol"
	"github.com/mempo/mempo/format"
)

// TurnAudit is the format audit of one rollouts dataset: its invalid turns by kind, and
// per trajectory the first invalid turn's kind and whether the trajectory ever returns
// to a valid turn. An evaluation counts every turn, so one trajectory that never
// recovers adds an invalid turn per remaining turn; the trajectory figures separate
// how often the format breaks from how long it stays broken.
type TurnAudit struct {
	Dir     string         `json:"dir"`
	Turns   int            `json:"turns"`
	Invalid int            `json:"invalid"`
	Kinds   map[string]int `json:"kinds"`
	// Trajectories, those with an invalid turn, and those whose turns after the first
	// invalid one are all invalid.
	Trajectories int            `json:"trajectories"`
	WithInvalid  int            `json:"with_invalid"`
	NeverRecover int            `json:"never_recover"`
	FirstKinds   map[string]int `json:"first_kinds"`
	// PostInvalid counts turns that follow an invalid turn; PostInvalidMem those of them
	// that start with the memory's open tag; Recovered those that are valid.
	PostInvalid    int `json:"post_invalid"`
	PostInvalidMem int `json:"post_invalid_mem"`
	Recovered      int `json:"recovered"`
}

// rolloutsProtocol reads the protocol the rollouts were generated with from their
// manifest's resolved config; the built-in default when the config has none.
func rolloutsProtocol(d *format.Dataset) (*protocol.Protocol, error) {
	p, ok, err := protocol.FromConfig(d.Manifest.Config)
	switch {
	case err != nil:
		return nil, fmt.Errorf("%s: the manifest's protocol: %w", d.Dir, err)
	case !ok:
		return protocol.Default(), nil
	}
	return p, nil
}

func openKind(dir string, want format.Kind) (*format.Dataset, error) {
	d, err := format.OpenDataset(dir)
	if err != nil {
		return nil, err
	}
	if d.Manifest.Kind != want {
		return nil, fmt.Errorf("%s is a %s dataset, want %s", dir, d.Manifest.Kind, want)
	}
	return d, nil
}

// AuditTurns reads a rollouts dataset and audits its turn format.
func AuditTurns(dir string) (TurnAudit, error) {
	a := TurnAudit{Dir: dir, Kinds: map[string]int{}, FirstKinds: map[string]int{}}
	d, err := openKind(dir, format.KindRollouts)
	if err != nil {
		return a, err
	}
	p, err := rolloutsProtocol(d)
	if err != nil {
		return a, err
	}
	rows, err := format.ReadDataset[format.Rollout](dir)
	if err != nil {
		return a, err
	}
	slices.SortStableFunc(rows, func(x, y format.Rollout) int {
		return cmp.Or(cmp.Compare(x.UID, y.UID), cmp.Compare(x.Sample, y.Sample), cmp.Compare(x.Turn, y.Turn))
	})
	for i := 0; i < len(rows); {
		j := i
		for j < len(rows) && rows[j].UID == rows[i].UID && rows[j].Sample == rows[i].Sample {
			j++
		}
		a.addTrajectory(p, rows[i:j])
		i = j
	}
	return a, nil
}

func (a *TurnAudit) addTrajectory(p *protocol.Protocol, traj []format.Rollout) {
	a.Trajectories++
	first, recovered := -1, false
	for t, r := range traj {
		a.Turns++
		invalid := r.Action == string(protocol.Invalid)
		if t > 0 && traj[t-1].Action == string(protocol.Invalid) {
			a.PostInvalid++
			if p.Memory.Open != "" && strings.HasPrefix(strings.TrimLeft(r.Response, " \t\n\r"), p.Memory.Open) {
				a.PostInvalidMem++
			}
			if !invalid {
				a.Recovered++
			}
		}
		if !invalid {
			if first >= 0 {
				recovered = true
			}
			continue
		}
		a.Invalid++
		k := p.Failure(r.Response)
		if k == "" {
			k = "other" // invalid by a rule the strict format does not have
		}
		a.Kinds[k]++
		if first < 0 {
			first = t
			a.FirstKinds[k]++
		}
	}
	if first >= 0 {
		a.WithInvalid++
		if !recovered {
			a.NeverRecover++
		}
	}
}

// MemoryAudit is one memory with its memory advantage and its form.
type MemoryAudit struct {
	UID        string  `json:"uid"`
	Sample     int32   `json:"sample"`
	Turn       int32   `json:"turn"`
	AdvMemory  float32 `json:"adv_memory"`
	MemReward  float32 `json:"mem_reward"`
	AdvOutcome float32 `json:"adv_outcome"`
	PMem       float32 `json:"p_mem,omitempty"`
	// Golds is "h/K": the objectives whose gold answer the memory names, of K; "" when
	// the memory pass did not count them.
	Golds string `json:"golds,omitempty"`
	// Facts is "h/F": the question's supporting facts the memory holds, of F; "" when
	// the prompts carry no facts or the memory pass did not count them.
	Facts string `json:"facts,omitempty"`
	// Tokens is the span's length, tags included; MemEnd its end in the response of
	// ResponseTokens tokens.
	Tokens         int `json:"tokens"`
	MemEnd         int `json:"mem_end"`
	ResponseTokens int `json:"response_tokens"`
	// Kind is the turn's action, or its failure kind when invalid.
	Kind string `json:"kind"`
	// FormatText lists protocol tags and chat markers found inside the memory text.
	FormatText []string `json:"format_text,omitempty"`
	Memory     string   `json:"memory"`
}

// TopMemories reads an advantages dataset, the rollouts and logprobs it was computed from
// (its manifest's inputs; a path that does not resolve from the working directory is
// looked up beside the advantages directory), and returns the n memories of largest
// memory advantage (the n smallest when n < 0), with their form.
func TopMemories(dir string, n int) ([]MemoryAudit, error) {
	ad, err := openKind(dir, format.KindAdvantages)
	if err != nil {
		return nil, err
	}
	rd, err := openKind(siblingInput(ad, "rollouts"), format.KindRollouts)
	if err != nil {
		return nil, fmt.Errorf("%s: its rollouts: %w", dir, err)
	}
	p, err := rolloutsProtocol(rd)
	if err != nil {
		return nil, err
	}
	advs, err := format.ReadDataset[format.Advantage](dir)
	if err != nil {
		return nil, err
	}
	rolls, err := format.ReadDataset[format.Rollout](rd.Dir)
	if err != nil {
		return nil, err
	}
	type key struct {
		uid          string
		sample, turn int32
	}
	byKey := make(map[key]*format.Rollout, len(rolls))
	for i := range rolls {
		byKey[key{rolls[i].UID, rolls[i].Sample, rolls[i].Turn}] = &rolls[i]
	}
	lps := map[key]format.Logprob{}
	if ld, err := openKind(siblingInput(ad, "logprobs"), format.KindLogprobs); err == nil {
		rows, err := format.ReadDataset[format.Logprob](ld.Dir)
		if err != nil {
			return nil, err
		}
		for _, l := range rows {
			lps[key{l.UID, l.Sample, l.Turn}] = l
		}
	}
	var out []MemoryAudit
	for _, a := range advs {
		if a.AdvMemory == nil {
			continue
		}
		k := key{a.UID, a.Sample, a.Turn}
		r, ok := byKey[k]
		if !ok {
			return nil, fmt.Errorf("%s: uid %s sample %d turn %d has no rollout row in %s", dir, a.UID, a.Sample, a.Turn, rd.Dir)
		}
		m := MemoryAudit{UID: a.UID, Sample: a.Sample, Turn: a.Turn, AdvMemory: *a.AdvMemory, AdvOutcome: a.AdvOutcome,
			Tokens: int(r.MemEnd - r.MemStart), MemEnd: int(r.MemEnd), ResponseTokens: len(r.ResponseIDs),
			Kind: r.Action, Memory: r.Memory, FormatText: formatText(p, r.Memory)}
		if a.MemReward != nil {
			m.MemReward = *a.MemReward
		}
		if r.Action == string(protocol.Invalid) {
			m.Kind = p.Failure(r.Response)
		}
		if l, ok := lps[k]; ok {
			if l.PMem != nil {
				m.PMem = *l.PMem
			}
			if l.MemGolds != nil {
				m.Golds = fmt.Sprintf("%d/%d", *l.MemGolds, l.Objectives)
			}
			if l.MemFacts != nil && l.Facts > 0 {
				m.Facts = fmt.Sprintf("%d/%d", *l.MemFacts, l.Facts)
			}
		}
		out = append(out, m)
	}
	slices.SortStableFunc(out, func(x, y MemoryAudit) int {
		return cmp.Or(cmp.Compare(y.AdvMemory, x.AdvMemory), cmp.Compare(x.UID, y.UID),
			cmp.Compare(x.Sample, y.Sample), cmp.Compare(x.Turn, y.Turn))
	})
	if n < 0 {
		slices.Reverse(out)
		n = -n
	}
	return out[:min(n, len(out))], nil
}

// siblingInput resolves the path of d's input name: as written when it exists from the
// working directory, else the directory of that base name beside d.
func siblingInput(d *format.Dataset, name string) string {
	for _, in := range d.Manifest.Inputs {
		if in.Name != name {
			continue
		}
		if _, err := os.Stat(filepath.Join(in.Path, format.ManifestName)); err == nil {
			return in.Path
		}
		return filepath.Join(filepath.Dir(d.Dir), filepath.Base(in.Path))
	}
	return filepath.Join(filepath.Dir(d.Dir), name)
}

// formatText lists the protocol's tags and chat markers that occur inside a memory.
func formatText(p *protocol.Protocol, memory string) []string {
	var found []string
	for _, t := range []string{p.Memory.Open, p.Memory.Close, p.Think.Open, p.Think.Close, p.Search.Open, p.Search.Close,
		p.Answer.Open, p.Answer.Close, "<information>", "</information>", "<|im_start|>", "<|im_end|>"} {
		if t != "" && strings.Contains(memory, t) && !slices.Contains(found, t) {
			found = append(found, t)
		}
	}
	return found
}
