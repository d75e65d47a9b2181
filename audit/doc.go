// Package audit reads what the pipeline committed and writes nothing: the commands that
// look at committed directories rather than make them.
//
//   - Inspect: a dataset's manifest, schema, per-column statistics and first rows
//     (mempo inspect).
//   - Verify: any committed directory against its commit record (mempo verify).
//   - AuditTurns and TopMemories: the turn-format and memory-advantage audits
//     (mempo inspect --turns, --top-memories).
//   - The viewer (mempo view): a read-only web page over a run directory — the datasets
//     and checkpoints, one question's trajectories turn by turn with their scores,
//     log-probs and advantages, a turn's tokens as a heat map of their advantages, and
//     one question across iterations.
//
// The viewer opens datasets lazily, only when a page needs them, and a directory that is
// not a committed dataset (no manifest, or a manifest listing a shard that is missing or
// of the wrong size) is an error naming it. Model text is untrusted: the API returns it
// as JSON data and the pages insert it as text only, under a strict
// Content-Security-Policy. The package sits on the stages' floor (docs/architecture.md):
// it reads what steps commit, and only cmd/ imports it.
package audit
