package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/mempo/mempo/format"
	"github.com/mempo/mempo/internal/renameio"
)

// compute runs the shards not yet recorded in the key's temp dir, then publishes it. A
// failure removes the temp dir unless a rerun of the same key is meant to continue
// from it (resumable); a killed run leaves it, and the rerun resumes there.
func (r *runner) compute(ctx context.Context, res *Result, fn WorkFunc) (_ *Result, err error) {
	start := r.now()
	tmp := res.Dir + ".tmp-" + res.Key.Short()
	defer func() {
		if err != nil && !resumable(err) {
			if rerr := os.RemoveAll(tmp); rerr != nil {
				r.log.Warn("could not remove the temp dir of a failed run", "dir", tmp, "err", rerr)
			}
		}
	}()
	recs, resumed, err := r.build(ctx, tmp, true, fn)
	if err != nil {
		return nil, err
	}
	res.Resumed = resumed
	// Every shard is checked against its record once more before anything is published:
	// a file changed or damaged after its record (a bad disk, a stray process) is caught
	// here, and its record dropped so the rerun recomputes it.
	for _, rec := range recs {
		if err := rec.check(tmp); err != nil {
			os.Remove(recordPath(tmp, rec.File))
			return nil, fmt.Errorf("stage %s: commit %s: %w; rerun to recompute it", r.spec.Stage, res.Dir, err)
		}
	}
	r.trace(StepCommit, -1)
	m := r.manifest(res.Key, recs, start)
	if err := r.summarize(tmp, m); err != nil {
		return nil, fmt.Errorf("stage %s: commit %s: summary: %w", r.spec.Stage, res.Dir, err)
	}
	if err := r.writeMetrics(tmp, recs, m); err != nil {
		return nil, fmt.Errorf("stage %s: commit %s: %w", r.spec.Stage, res.Dir, DiskFull(err, tmp))
	}
	if err := r.writeManifest(tmp, m); err != nil {
		return nil, fmt.Errorf("stage %s: commit %s: %w", r.spec.Stage, res.Dir, DiskFull(err, tmp))
	}
	r.trace(StepManifest, -1)
	if err := r.publish(tmp, res.Dir, res.Key); err != nil {
		return nil, fmt.Errorf("stage %s: commit %s: %w", r.spec.Stage, res.Dir, err)
	}
	res.Manifest = m
	r.log.Info("committed", "dir", res.Dir, "key", res.Key.Short(), "digest", m.Digest()[:12],
		"rows", m.Rows(), "shards", len(recs), "resumed", resumed, "timing_s", m.Timings.TotalS)
	fmt.Fprintf(r.spec.Stdout, "%s: wrote %s (%d rows in %d shards, %d resumed, digest %s)\n",
		r.spec.Stage, res.Dir, m.Rows(), len(recs), resumed, m.Digest()[:12])
	return res, nil
}

// resumable reports whether err came from outside the stage, so that a rerun of the
// same key, once it is dealt with, can use the finished shards: the run was
// interrupted (SIGINT, SIGTERM), the operating system failed a call (a full disk, an
// I/O error, a connection refused or reset), or the stage marked it ErrTransient (a
// server that stopped answering). Anything else is the stage's own finding about its
// inputs or config (a bad row, a value that overflows), which a rerun of the same key
// finds again, so its shards would only take disk space.
func resumable(err error) bool {
	var errno syscall.Errno
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || errors.As(err, &errno) ||
		errors.Is(err, ErrTransient)
}

// build computes this run's slice of the plan into dir. With resume, a shard whose
// record matches its file is kept; without, dir starts empty (a --verify rerun).
func (r *runner) build(ctx context.Context, dir string, resume bool, fn WorkFunc) (recs []record, resumed int, err error) {
	if !resume {
		if err := os.RemoveAll(dir); err != nil {
			return nil, 0, fmt.Errorf("stage %s: %w", r.spec.Stage, err)
		}
	}
	if err := os.MkdirAll(filepath.Join(dir, recordsDir), 0o755); err != nil {
		return nil, 0, fmt.Errorf("stage %s: %w", r.spec.Stage, DiskFull(err, dir))
	}
	lo, hi := r.spec.Part.Range(r.spec.Shards)
	r.progress = NewReporter(r.spec.ProgressOut, r.spec.Progress, r.spec.Stage, int64(hi-lo), r.now, r.spec.ProgressEvery)
	defer r.progress.Finish()
	for g := lo; g < hi; g++ {
		file := format.ShardName(g - lo)
		if resume {
			if rec, ok := r.resume(dir, file, g); ok {
				recs = append(recs, rec)
				resumed++
				r.progress.Skip(1, rec.Rows)
				continue
			}
		}
		if err := ctx.Err(); err != nil {
			return nil, 0, fmt.Errorf("stage %s: shard %d: %w", r.spec.Stage, g, err)
		}
		rec, err := r.shard(ctx, dir, file, g, fn)
		if err != nil {
			return nil, 0, err
		}
		recs = append(recs, rec)
		r.progress.Add(1, 0, 0)
	}
	return recs, resumed, nil
}

// resume reports whether shard g of an interrupted run is complete: its record parses
// and names a file with the recorded size and sha256.
func (r *runner) resume(dir, file string, g int) (record, bool) {
	rec, err := readRecord(dir, file, g)
	if errors.Is(err, os.ErrNotExist) {
		return record{}, false
	}
	if err == nil {
		err = rec.check(dir)
	}
	if err != nil {
		r.log.Warn("recomputing shard", "shard", g, "reason", err)
		os.Remove(recordPath(dir, file))
		return record{}, false
	}
	return rec, true
}

// shard runs fn for plan shard g and records the result once the file is durable.
func (r *runner) shard(ctx context.Context, dir, file string, g int, fn WorkFunc) (record, error) {
	path := filepath.Join(dir, file)
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return record{}, fmt.Errorf("stage %s: shard %d: %w", r.spec.Stage, g, err)
	}
	w := &Work{Shard: g, Path: path, run: r}
	start := r.now()
	if err := fn(ctx, w); err != nil {
		// The stage's error names the input it was reading; the file it was writing
		// comes after.
		return record{}, fmt.Errorf("stage %s: shard %d: %w (writing %s)", r.spec.Stage, g, DiskFull(err, dir), path)
	}
	r.trace(StepWritten, g)
	sum, n, err := syncHash(path)
	if errors.Is(err, os.ErrNotExist) {
		return record{}, fmt.Errorf("stage %s: shard %d: the stage wrote no file at %s: %w", r.spec.Stage, g, path, ErrSpec)
	}
	if err != nil {
		return record{}, fmt.Errorf("stage %s: shard %d: %w", r.spec.Stage, g, DiskFull(err, dir))
	}
	rec := record{Shard: g, File: file, SHA256: sum, Bytes: n, Rows: w.rows, Tokens: w.token,
		Seconds: r.now().Sub(start).Seconds(), Phases: w.phases}
	b, err := json.Marshal(rec)
	if err != nil {
		return record{}, fmt.Errorf("stage %s: shard %d: %w", r.spec.Stage, g, err)
	}
	if err := r.spec.writeFile(recordPath(dir, file), append(b, '\n')); err != nil {
		return record{}, fmt.Errorf("stage %s: shard %d: record: %w", r.spec.Stage, g, DiskFull(err, dir))
	}
	r.trace(StepRecorded, g)
	r.log.Debug("shard done", "shard", g, "file", file, "rows", rec.Rows, "bytes", rec.Bytes)
	return rec, nil
}

func (r *runner) manifest(key Key, recs []record, start time.Time) *format.Manifest {
	m := &format.Manifest{
		Kind:          r.spec.Kind,
		SchemaVersion: r.spec.SchemaVersion,
		Stage:         r.spec.Stage,
		CacheKey:      key.String(),
		CodeVersion:   r.code,
		Config:        json.RawMessage(r.config),
		Seed:          r.spec.Seed,
		Inputs:        r.spec.Inputs,
		Outputs:       make([]format.Output, 0, len(recs)),
		Host:          r.spec.Host,
		Created:       r.now().UTC(),
	}
	for _, rec := range recs {
		m.Outputs = append(m.Outputs, rec.output())
	}
	r.measure(m, recs, start)
	return m
}

// summarize adds the stage's own figures, computed from the finished shards in dir, to
// the manifest's metrics. They come from the output, not from the run, so a resumed run
// reports the same figures as an uninterrupted one.
func (r *runner) summarize(dir string, m *format.Manifest) error {
	if r.spec.Summarize == nil {
		return nil
	}
	sum, err := r.spec.Summarize(dir, m.Outputs)
	if err != nil {
		return err
	}
	for k, v := range sum {
		if _, taken := m.Metrics[k]; taken {
			return fmt.Errorf("metric %q is the runtime's own: %w", k, ErrSpec)
		}
		m.Metrics[k] = v
	}
	return nil
}

func (r *runner) writeManifest(dir string, m *format.Manifest) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	return r.spec.writeFile(filepath.Join(dir, format.ManifestName), append(b, '\n'))
}

// publish renames the finished temp dir over target (renameio.PublishDir: a kill between
// its two renames leaves the complete temp dir, which the rerun publishes without
// recomputing), then drops the completion records resume no longer needs. What a kill
// in between leaves (the lock, the previous output moved aside, the records) the next
// run of target removes (sweep, tidy).
func (r *runner) publish(tmp, target string, key Key) error {
	trace := func(s renameio.PublishStep) { r.trace(Step(s), -1) }
	if err := renameio.PublishDir(tmp, target, target+".old-"+key.Short(), r.log, trace); err != nil {
		return err
	}
	r.trace(StepPublished, -1)
	if err := os.RemoveAll(filepath.Join(target, recordsDir)); err != nil {
		r.log.Warn("remove completion records", "dir", target, "err", err)
	}
	return nil
}

// verify recomputes a cache hit from scratch beside it and compares outputs shard by
// shard; the recomputation is removed either way.
func (r *runner) verify(ctx context.Context, dir string, key Key, m *format.Manifest, fn WorkFunc) error {
	vdir := dir + ".verify-" + key.Short()
	defer os.RemoveAll(vdir)
	recs, _, err := r.build(ctx, vdir, false, fn)
	if err != nil {
		return fmt.Errorf("verify %s: %w", dir, err)
	}
	if len(recs) != len(m.Outputs) {
		return fmt.Errorf("verify %s: recomputed %d shards, manifest lists %d: %w", dir, len(recs), len(m.Outputs), ErrVerify)
	}
	for i, rec := range recs {
		if got, want := rec.output(), m.Outputs[i]; got != want {
			return fmt.Errorf("verify %s: %s: recomputed sha256 %s (%d bytes, %d rows), manifest has %s (%d bytes, %d rows): %w",
				dir, want.File, short(got.SHA256), got.Bytes, got.Rows, short(want.SHA256), want.Bytes, want.Rows, ErrVerify)
		}
	}
	r.log.Info("verified", "dir", dir, "digest", m.Digest()[:12])
	return nil
}
