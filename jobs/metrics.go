package jobs

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"syscall"
	"time"

	"github.com/mempo/mempo/format"
	"github.com/mempo/mempo/internal/procstat"
)

// MetricsName is the per-shard metrics file written beside the manifest (and the
// per-step file of a checkpoint). It is not a shard and not in the digest: timings
// differ from run to run, content does not. The leading "_" makes Arrow readers
// (pyarrow.dataset, pandas.read_parquet, Spark) skip it, as they skip _manifest.json,
// so a dataset directory opens as a Parquet dataset.
const MetricsName = "_metrics.jsonl"

// legacyMetricsName is MetricsName in runs written before the rename. Directories of
// those runs still hold it, and it is still a record of the run, not content.
const legacyMetricsName = "metrics.jsonl"

// isMetrics says whether name is the metrics file of a directory, under either name.
func isMetrics(name string) bool {
	return name == MetricsName || name == legacyMetricsName
}

// measure fills the manifest's timings and metrics. timing_s is this invocation's wall
// time; shard_s sums the recorded compute time of every shard, including shards done by
// an interrupted earlier run, so tokens/s stays right across a resume.
func (r *runner) measure(m *format.Manifest, recs []record, start time.Time) {
	var rows, tokens int64
	var shardS float64
	m.Timings.Phases = nil
	for _, rec := range recs {
		rows += rec.Rows
		tokens += rec.Tokens
		shardS += rec.Seconds
		addPhases(&m.Timings.Phases, rec.Phases)
	}
	m.Timings.TotalS = r.now().Sub(start).Seconds()
	if shardS > 0 {
		m.Timings.TokensPS = float64(tokens) / shardS
	}
	m.Timings.PeakRSSMB = peakRSSMB()
	m.Metrics = map[string]float64{
		"timing_s":     m.Timings.TotalS,
		"shard_s":      shardS,
		"rows":         float64(rows),
		"tokens":       float64(tokens),
		"tokens_per_s": m.Timings.TokensPS,
		"peak_rss_mb":  m.Timings.PeakRSSMB,
		"shards":       float64(len(recs)),
	}
}

// addPhases adds phases' seconds to sum's, making sum when there is a phase to add.
func addPhases(sum *map[string]float64, phases map[string]float64) {
	for k, v := range phases {
		if *sum == nil {
			*sum = map[string]float64{}
		}
		(*sum)[k] += v
	}
}

// writeMetrics writes MetricsName into dir: one line per shard, then one line with
// the stage totals.
func (r *runner) writeMetrics(dir string, recs []record, m *format.Manifest) error {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	for _, rec := range recs {
		line := map[string]any{"shard": rec.Shard, "file": rec.File, "rows": rec.Rows,
			"tokens": rec.Tokens, "seconds": rec.Seconds}
		if rec.Seconds > 0 {
			line["tokens_per_s"] = float64(rec.Tokens) / rec.Seconds
		}
		if len(rec.Phases) > 0 {
			line["phases"] = rec.Phases
		}
		if err := enc.Encode(line); err != nil {
			return err
		}
	}
	total := map[string]any{"stage": m.Stage, "cache_key": m.CacheKey}
	for k, v := range m.Metrics {
		total[k] = v
	}
	if err := enc.Encode(total); err != nil {
		return err
	}
	return r.spec.writeFile(filepath.Join(dir, MetricsName), b.Bytes())
}

// peakRSSMB is the process's peak resident set in MiB: VmHWM from /proc/self/status,
// else getrusage's ru_maxrss (KiB on Linux); 0 when neither is available.
func peakRSSMB() float64 {
	if mb := procstat.MB("VmHWM"); mb > 0 {
		return mb
	}
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err == nil {
		return float64(ru.Maxrss) / 1024
	}
	return 0
}
