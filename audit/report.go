package audit

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/mempo/mempo/agent/protocol"
)

// WriteTurns writes turn audits as a table, one line per dataset: invalid turns and
// their rate, trajectories with an invalid turn and those that never recover, what the
// turns after an invalid turn do, and the failure kinds (mempo inspect --turns).
func WriteTurns(w io.Writer, audits []TurnAudit) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "dataset\tturns\tinvalid\trate\ttrajectories\twith invalid\tnever recover\tafter invalid: open mem / valid\tinvalid turns by kind\tfirst invalid turn by kind")
	for _, a := range audits {
		rate := 0.0
		if a.Turns > 0 {
			rate = float64(a.Invalid) / float64(a.Turns)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.3f\t%d\t%d\t%d\t%d of %d / %d\t%s\t%s\n", a.Dir, a.Turns, a.Invalid, rate,
			a.Trajectories, a.WithInvalid, a.NeverRecover, a.PostInvalidMem, a.PostInvalid, a.Recovered,
			kindList(a.Kinds), kindList(a.FirstKinds))
	}
	return tw.Flush()
}

// kindList writes counts by failure kind in format order, "-" when there are none.
func kindList(m map[string]int) string {
	var parts []string
	for _, k := range append(protocol.Failures, "other") {
		if m[k] > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
		}
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}

// WriteTopMemories writes memory audits as a table, one line per memory: its memory
// advantage, reward and form (mempo inspect --top-memories).
func WriteTopMemories(w io.Writer, ms []MemoryAudit) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "A^M\tR^M\tA^T\tP_mem\tgolds\tfacts\ttokens\tend/response\tturn\tkind\tformat text\tuid/sample\tmemory")
	for _, m := range ms {
		fmt.Fprintf(tw, "%.2f\t%.3f\t%.2f\t%.3f\t%s\t%s\t%d\t%d/%d\t%d\t%s\t%s\t%s/%d\t%q\n", m.AdvMemory, m.MemReward, m.AdvOutcome,
			m.PMem, dash(m.Golds), dash(m.Facts), m.Tokens, m.MemEnd, m.ResponseTokens, m.Turn, m.Kind, dash(strings.Join(m.FormatText, " ")), m.UID, m.Sample, clip(m.Memory, 90))
	}
	return tw.Flush()
}

// dash stands in for a count the dataset does not have.
func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func clip(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n]) + "…"
	}
	return s
}
