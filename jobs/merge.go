package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/mempo/mempo/format"
	"github.com/mempo/mempo/internal/renameio"
)

// merge builds Out from the Merge parts under Out/_parts/. Each part must be committed
// with this spec's part key, and every shard is re-hashed against its part's manifest.
// Shards keep the plan order and are renumbered from 0, so when every part ran the
// same stage code, the merged manifest lists exactly what an unsharded run lists and
// the dataset digest is the same; the manifest also carries the unsharded key, so a
// later unsharded run of the same spec is a cache hit.
//
// Out already holds the parts, so a merge cannot publish by renaming a temp dir over
// it. It commits in place instead: any old manifest is removed first, shards are
// hard-linked (copied across file systems) from the parts, and the manifest is
// written last, so Out is a dataset only once the merge is complete.
func (r *runner) merge(ctx context.Context) (*Result, error) {
	key := r.key(Part{})
	dir := r.spec.Out
	res := &Result{Dir: dir, Key: key}
	if m := r.cached(dir, key); m != nil && !r.spec.Force {
		return r.hit(res, m), nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("stage %s: merge: %w", r.spec.Stage, err)
	}
	release, err := r.spec.lock(dir, r.log)
	if err != nil {
		return nil, fmt.Errorf("stage %s: merge: %w", r.spec.Stage, err)
	}
	defer release()
	if m := r.cached(dir, key); m != nil && !r.spec.Force {
		return r.hit(res, m), nil
	}
	start := r.now()
	srcs, parts, err := r.gatherParts(ctx, dir)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*Result, error) {
		return nil, fmt.Errorf("stage %s: merge %s: %w", r.spec.Stage, dir, DiskFull(err, dir))
	}
	if err := os.Remove(filepath.Join(dir, format.ManifestName)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fail(err)
	}
	if err := renameio.Sync(dir); err != nil {
		return fail(err)
	}
	m := r.manifest(key, nil, start)
	for k, src := range srcs {
		o := src.out
		o.File = format.ShardName(k)
		if err := linkOrCopy(src.path, filepath.Join(dir, o.File)); err != nil {
			return fail(err)
		}
		m.Outputs = append(m.Outputs, o)
	}
	r.removeStaleShards(dir, len(srcs))
	if err := renameio.Sync(dir); err != nil {
		return fail(err)
	}
	mergeMetrics(m, parts, r.now().Sub(start).Seconds())
	r.trace(StepCommit, -1)
	if err := r.writePartMetrics(dir, m, parts); err != nil {
		return fail(err)
	}
	if err := r.writeManifest(dir, m); err != nil {
		return fail(err)
	}
	r.trace(StepPublished, -1)
	res.Manifest = m
	r.log.Info("merged", "dir", dir, "parts", len(parts), "digest", m.Digest()[:12], "rows", m.Rows())
	fmt.Fprintf(r.spec.Stdout, "%s: merged %d parts into %s (%d rows in %d shards, digest %s)\n",
		r.spec.Stage, len(parts), dir, m.Rows(), len(m.Outputs), m.Digest()[:12])
	return res, nil
}

type mergeSource struct {
	path string
	out  format.Output
}

// gatherParts reads and checks every part; shards come back in plan order.
func (r *runner) gatherParts(ctx context.Context, dir string) ([]mergeSource, []*format.Manifest, error) {
	var srcs []mergeSource
	var parts []*format.Manifest
	for i := range r.spec.Merge {
		p := Part{Index: i, Count: r.spec.Merge}
		pdir := filepath.Join(dir, PartsDir, p.dir())
		m, err := format.ReadManifest(pdir)
		if err != nil {
			return nil, nil, fmt.Errorf("stage %s: merge %s: part %s: %w; run the stage with --shard %s first: %w",
				r.spec.Stage, dir, p, err, p, ErrIncomplete)
		}
		if want := r.key(p).String(); m.CacheKey != want {
			return nil, nil, fmt.Errorf("stage %s: merge %s: part %s (%s) has key %s, want %s: it was computed with another config, input, seed or code; rerun it with --shard %s: %w",
				r.spec.Stage, dir, p, pdir, short(m.CacheKey), short(want), p, ErrIncomplete)
		}
		for _, o := range m.Outputs {
			if err := ctx.Err(); err != nil {
				return nil, nil, err
			}
			path := filepath.Join(pdir, o.File)
			sum, n, err := hashFile(path)
			if err == nil && (sum != o.SHA256 || n != o.Bytes) {
				err = fmt.Errorf("%s: %d bytes sha256 %s, manifest says %d bytes sha256 %s: %w",
					path, n, short(sum), o.Bytes, short(o.SHA256), format.ErrCorrupt)
			}
			if err != nil {
				return nil, nil, fmt.Errorf("stage %s: merge %s: part %s: %w; rerun it with --shard %s --force",
					r.spec.Stage, dir, p, err, p)
			}
			srcs = append(srcs, mergeSource{path: path, out: o})
		}
		parts = append(parts, m)
	}
	return srcs, parts, nil
}

// mergeMetrics sums the parts' work: timing_s, shard_s and the phases are compute time
// over all parts, merge_s is the merge itself, peak RSS is the largest part's.
func mergeMetrics(m *format.Manifest, parts []*format.Manifest, mergeS float64) {
	sum := map[string]float64{}
	var phases map[string]float64
	for _, p := range parts {
		addPhases(&phases, p.Timings.Phases)
		for _, k := range []string{"timing_s", "shard_s", "rows", "tokens", "shards"} {
			sum[k] += p.Metrics[k]
		}
		sum["peak_rss_mb"] = max(sum["peak_rss_mb"], p.Timings.PeakRSSMB)
	}
	sum["merge_s"] = mergeS
	if sum["shard_s"] > 0 {
		sum["tokens_per_s"] = sum["tokens"] / sum["shard_s"]
	}
	m.Metrics = sum
	m.Timings = format.Timings{TotalS: sum["timing_s"], TokensPS: sum["tokens_per_s"], PeakRSSMB: sum["peak_rss_mb"],
		Phases: phases}
}

// writePartMetrics writes MetricsName for a merge: one line per part, then the totals.
func (r *runner) writePartMetrics(dir string, m *format.Manifest, parts []*format.Manifest) error {
	var b []byte
	for i, p := range parts {
		line := map[string]any{"part": Part{Index: i, Count: len(parts)}.String(), "host": p.Host}
		for k, v := range p.Metrics {
			line[k] = v
		}
		j, err := json.Marshal(line)
		if err != nil {
			return err
		}
		b = append(append(b, j...), '\n')
	}
	total := map[string]any{"stage": m.Stage, "cache_key": m.CacheKey}
	for k, v := range m.Metrics {
		total[k] = v
	}
	j, err := json.Marshal(total)
	if err != nil {
		return err
	}
	return r.spec.writeFile(filepath.Join(dir, MetricsName), append(append(b, j...), '\n'))
}

// removeStaleShards removes shard files numbered n and up, left by an earlier, larger
// merge; the manifest never lists them, so failures are only logged.
func (r *runner) removeStaleShards(dir string, n int) {
	for k := n; ; k++ {
		path := filepath.Join(dir, format.ShardName(k))
		err := os.Remove(path)
		if errors.Is(err, os.ErrNotExist) {
			return
		}
		if err != nil {
			r.log.Warn("remove stale shard", "file", path, "err", err)
			return
		}
	}
}

// linkOrCopy makes dst hold src's bytes: a hard link costs no space and no I/O; across
// file systems it falls back to a copy, fsynced.
func linkOrCopy(src, dst string) error {
	if err := os.Remove(dst); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if err := os.Link(src, dst); err == nil {
		return nil
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(dst)
		return fmt.Errorf("copy %s to %s: %w", src, dst, err)
	}
	return nil
}
