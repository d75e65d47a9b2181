package jobs

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/mempo/mempo/format"
	"github.com/mempo/mempo/internal/renameio"
)

// Artifact is a checkpoint being built: Tmp, a directory beside Out named by the cache
// key, under Out's lock — the same lock file, the same takeover of a dead writer's lock
// and the same removal of what dead writers left (sweep) as a dataset's. A run that is
// killed or fails leaves Tmp with its snapshots, and a rerun of the same key continues
// there; Publish makes Tmp the checkpoint at Out.
type Artifact struct {
	Out, Tmp string
	Key      Key
	spec     Spec // the runtime fields Begin was given, with defaults
	log      *slog.Logger
	trace    func(step Step, n int)
	release  func()
}

// Begin returns the commit record of spec.Out when it already is the checkpoint of key
// (a cache hit, unless spec.Force), else the artifact to build, holding Out's lock;
// Release it. Either way, what writers that are no longer alive left beside Out (their
// lock, temp dirs of other keys, a previous checkpoint moved aside) is removed and
// reported in one log line; a hit takes the lock for that only when there is something
// to remove. Of spec's runtime fields it uses Out, Force, Log, Host, Now, Trace and
// Board, which gets a hit's metrics here and a published checkpoint's in Publish.
func Begin(spec Spec, key Key) (*Artifact, *format.Commit, error) {
	spec = spec.WithDefaults()
	out, log := spec.Out, spec.Log
	if out == "" {
		return nil, nil, fmt.Errorf("no output checkpoint directory (--out): %w", ErrSpec)
	}
	if c := cachedCheckpoint(out, key, log); c != nil && !spec.Force {
		tidy(spec, log, out, nil, nil)
		spec.logCheckpointBoard(log, c.Stage, key, true, out)
		return nil, c, nil
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return nil, nil, fmt.Errorf("checkpoint %s: %w", out, err)
	}
	release, stale, err := spec.takeLock(out, log)
	if err != nil {
		return nil, nil, err
	}
	a := &Artifact{Out: out, Tmp: out + ".tmp-" + key.Short(), Key: key, spec: spec, log: log, trace: spec.Trace, release: release}
	// Holding the lock, no other writer of out is alive: what earlier ones left is
	// removed, except this key's temp dir, which holds the snapshots this run resumes.
	sweep(log, out, stale, a.Tmp)
	if c := cachedCheckpoint(out, key, log); c != nil && !spec.Force {
		release()
		spec.logCheckpointBoard(log, c.Stage, key, true, out)
		return nil, c, nil // committed by another writer while we waited
	}
	if err := os.MkdirAll(a.Tmp, 0o755); err != nil {
		release()
		return nil, nil, fmt.Errorf("checkpoint %s: %w", out, err)
	}
	return a, nil, nil
}

// cachedCheckpoint returns out's commit record if it is the complete checkpoint of key;
// anything else is a miss, logged with its reason.
func cachedCheckpoint(out string, key Key, log *slog.Logger) *format.Commit {
	if _, err := os.Lstat(filepath.Join(out, format.CommitFile)); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	c, err := format.ReadCommit(out)
	if err == nil && c.CacheKey != key.String() {
		err = fmt.Errorf("cache key %.12s, want %s", c.CacheKey, key.Short())
	}
	if err == nil {
		err = checkSizes(c, out)
	}
	if err != nil {
		log.Info("cache miss", "dir", out, "reason", err)
		return nil
	}
	return c
}

// Release gives up Out's lock; the temp dir stays for a rerun unless published.
func (a *Artifact) Release() {
	if a.release != nil {
		a.release()
		a.release = nil
	}
}

// Publish commits Tmp as the checkpoint at Out: the snapshots are removed, every file
// is fsynced and hashed into c.Files, checkpoint.json is written last (and synced with
// its directory) with the key and this code's version, and the tree is renamed over
// Out (renameio.PublishDir: an old Out is moved aside first and removed after). It
// returns the record written. Steps after the rename — the removal of the old Out, the
// metrics for Spec.Board (logCheckpointBoard) — are logged, not returned; what a
// kill leaves between them (the lock, the old Out moved aside) the next Begin of Out
// removes. Spec.Trace sees StepManifest once checkpoint.json is durable in Tmp, then
// StepAside and StepRenamed; StepPublished, after Publish returns, is the caller's to
// report (train.Loop does), as the lock is held until Release.
func (a *Artifact) Publish(c format.Commit) (*format.Commit, error) {
	if err := os.RemoveAll(filepath.Join(a.Tmp, resumeDir)); err != nil {
		return nil, fmt.Errorf("commit %s: %w", a.Out, err)
	}
	c.Format, c.Version, c.CacheKey, c.CodeVersion = format.CommitFormat, format.CommitVersion, a.Key.String(), CodeVersion()
	files, err := digestTree(a.Tmp)
	if err != nil {
		return nil, fmt.Errorf("commit %s: %w", a.Out, err)
	}
	c.Files = files
	if err := WriteJSON(filepath.Join(a.Tmp, format.CommitFile), c); err != nil {
		return nil, fmt.Errorf("commit %s: %w", a.Out, err)
	}
	a.step(StepManifest)
	trace := func(s renameio.PublishStep) { a.step(Step(s)) }
	if err := renameio.PublishDir(a.Tmp, a.Out, a.Out+".old-"+a.Key.Short(), a.log, trace); err != nil {
		return nil, fmt.Errorf("commit: %w", err)
	}
	a.spec.logCheckpointBoard(a.log, c.Stage, a.Key, false, a.Out)
	return &c, nil
}

func (a *Artifact) step(s Step) {
	if a.trace != nil {
		a.trace(s, -1)
	}
}

// digestTree fsyncs and hashes every file under dir, sorted by path, and fsyncs its
// subdirectories. The commit record
// itself, dot files (temp files of a writer) and MetricsName (or its legacy name) are
// left out: it holds timings, which differ between identical runs, so it is a record
// of the run, not content.
func digestTree(dir string) ([]format.FileDigest, error) {
	var files []format.FileDigest
	var dirs []string // subdirectories, parents before children
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			if err == nil && path != dir {
				dirs = append(dirs, path)
			}
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		if rel == format.CommitFile || isMetrics(rel) || strings.HasPrefix(d.Name(), ".") {
			return nil
		}
		if err := renameio.Sync(path); err != nil {
			return err
		}
		sum, n, err := hashFile(path)
		if err != nil {
			return err
		}
		files = append(files, format.FileDigest{File: filepath.ToSlash(rel), SHA256: sum, Bytes: n})
		return nil
	})
	// A subdirectory's entries are durable once it is synced, children first; dir's
	// own are synced with the commit record.
	for i := len(dirs) - 1; i >= 0 && err == nil; i-- {
		err = renameio.Sync(dirs[i])
	}
	sort.Slice(files, func(i, j int) bool { return files[i].File < files[j].File })
	return files, err
}
