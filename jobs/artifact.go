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

	"github.com/mempo/mempo/internal/renameio"
)

// Artifact is a checkpoint being built: Tmp, a directory beside Out named by the cache
// key, under Out's lock — the same lock file, and the same takeover of a dead writer's
// lock, as a dataset's. A run that is killed leaves Tmp with its snapshots, and a rerun
// of the same key continues there; Publish makes Tmp the checkpoint at Out.
type Artifact struct {
	Out, Tmp string
	Key      Key
	log      *slog.Logger
	release  func()
}

// Begin returns the commit record of spec.Out when it already is the checkpoint of key
// (a cache hit, unless spec.Force), else the artifact to build, holding Out's lock;
// Release it. Of spec's runtime fields it uses Out, Force, Log, Host and Now.
func Begin(spec Spec, key Key) (*Artifact, *Commit, error) {
	spec = spec.WithDefaults()
	out, log := spec.Out, spec.Log
	if out == "" {
		return nil, nil, fmt.Errorf("no output checkpoint directory (--out): %w", ErrSpec)
	}
	if c := cachedCheckpoint(out, key, log); c != nil && !spec.Force {
		return nil, c, nil
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return nil, nil, fmt.Errorf("checkpoint %s: %w", out, err)
	}
	release, err := spec.lock(out, log)
	if err != nil {
		return nil, nil, err
	}
	if c := cachedCheckpoint(out, key, log); c != nil && !spec.Force {
		release()
		return nil, c, nil // committed by another writer while we waited
	}
	a := &Artifact{Out: out, Tmp: out + ".tmp-" + key.Short(), Key: key, log: log, release: release}
	if err := os.MkdirAll(a.Tmp, 0o755); err != nil {
		release()
		return nil, nil, fmt.Errorf("checkpoint %s: %w", out, err)
	}
	return a, nil, nil
}

// cachedCheckpoint returns out's commit record if it is the complete checkpoint of key;
// anything else is a miss, logged with its reason.
func cachedCheckpoint(out string, key Key, log *slog.Logger) *Commit {
	if _, err := os.Lstat(filepath.Join(out, CommitFile)); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	c, err := ReadCommit(out)
	if err == nil && c.CacheKey != key.String() {
		err = fmt.Errorf("cache key %.12s, want %s", c.CacheKey, key.Short())
	}
	if err == nil {
		err = c.check(out)
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
// its directory) with the key and this code's version, and the tree is renamed over Out (an old Out is moved aside
// first and removed after). It returns the record written. Steps after the rename are
// logged, not returned.
func (a *Artifact) Publish(c Commit) (*Commit, error) {
	if err := os.RemoveAll(filepath.Join(a.Tmp, resumeDir)); err != nil {
		return nil, fmt.Errorf("commit %s: %w", a.Out, err)
	}
	c.Format, c.Version, c.CacheKey, c.CodeVersion = commitFormat, commitVersion, a.Key.String(), CodeVersion()
	files, err := digestTree(a.Tmp)
	if err != nil {
		return nil, fmt.Errorf("commit %s: %w", a.Out, err)
	}
	c.Files = files
	if err := WriteJSON(filepath.Join(a.Tmp, CommitFile), c); err != nil {
		return nil, fmt.Errorf("commit %s: %w", a.Out, err)
	}
	if err := renameio.PublishDir(a.Tmp, a.Out, a.Out+".old-"+a.Key.Short(), a.log); err != nil {
		return nil, fmt.Errorf("commit: %w", err)
	}
	return &c, nil
}

// digestTree fsyncs and hashes every file under dir, sorted by path. The commit record
// itself, dot files (temp files of a writer) and metrics.jsonl are left out:
// metrics.jsonl holds timings, which differ between identical runs, so it is a record
// of the run, not content.
func digestTree(dir string) ([]FileDigest, error) {
	var files []FileDigest
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		if rel == CommitFile || rel == MetricsName || strings.HasPrefix(d.Name(), ".") {
			return nil
		}
		if err := renameio.Sync(path); err != nil {
			return err
		}
		sum, n, err := hashFile(path)
		if err != nil {
			return err
		}
		files = append(files, FileDigest{File: filepath.ToSlash(rel), SHA256: sum, Bytes: n})
		return nil
	})
	sort.Slice(files, func(i, j int) bool { return files[i].File < files[j].File })
	return files, err
}
