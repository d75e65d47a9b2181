package train

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/mempo/mempo/internal/renameio"
	"github.com/mempo/mempo/model/qwen2"
)

// latestFile names the newest complete snapshot inside resumeDir; it is written last,
// so it never names a partial one.
const latestFile = "latest.json"

// CursorFile holds the caller's resume cursor inside a snapshot.
const CursorFile = "cursor.json"

type latest struct {
	Step int `json:"step"`
}

func (a *Artifact) snapshotDir(step int) string {
	return filepath.Join(a.Tmp, resumeDir, "step-"+strconv.Itoa(step))
}

// SaveSnapshot records a resumable state after step optimizer steps of this run: the
// weights (qwen2.Save: the exact bytes, so a reload continues bit for bit), the
// optimizer state and the caller's cursor (JSON). The snapshot is complete before
// latest.json names it; older snapshots are removed after.
func (a *Artifact) SaveSnapshot(step int, m *qwen2.Model, o *AdamW, cursor any) error {
	dir := a.snapshotDir(step)
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("snapshot %s: %w", dir, err)
	}
	if err := m.Save(dir, 0); err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	if err := SaveOptimizer(filepath.Join(dir, OptimizerFile), o); err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	if err := WriteJSON(filepath.Join(dir, CursorFile), cursor); err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	if err := renameio.Sync(dir); err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	if err := WriteJSON(filepath.Join(a.Tmp, resumeDir, latestFile), latest{Step: step}); err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	entries, _ := os.ReadDir(filepath.Join(a.Tmp, resumeDir))
	for _, e := range entries {
		if p := filepath.Join(a.Tmp, resumeDir, e.Name()); e.IsDir() && p != dir {
			if err := os.RemoveAll(p); err != nil {
				a.log.Warn("remove old snapshot", "dir", p, "err", err)
			}
		}
	}
	return nil
}

// Snapshot is the newest complete snapshot of an interrupted run.
type Snapshot struct {
	Dir  string // a checkpoint directory qwen2.Load reads; OptimizerFile inside
	Step int
}

// LoadSnapshot returns the newest snapshot and decodes its cursor into cursor; ok is
// false when the run has none. A damaged snapshot is logged and ignored, so the run
// starts over rather than failing.
func (a *Artifact) LoadSnapshot(cursor any) (s Snapshot, ok bool) {
	var l latest
	b, err := os.ReadFile(filepath.Join(a.Tmp, resumeDir, latestFile))
	if errors.Is(err, os.ErrNotExist) {
		return Snapshot{}, false
	}
	if err == nil {
		err = json.Unmarshal(b, &l)
	}
	if err == nil {
		s = Snapshot{Dir: a.snapshotDir(l.Step), Step: l.Step}
		b, err = os.ReadFile(filepath.Join(s.Dir, CursorFile))
	}
	if err == nil {
		err = json.Unmarshal(b, cursor)
	}
	if err != nil {
		a.log.Warn("ignoring damaged snapshot; starting over", "dir", a.Tmp, "err", err)
		return Snapshot{}, false
	}
	return s, true
}

// lockInfo is the content of <out>.lock.
type lockInfo struct {
	PID  int    `json:"pid"`
	Host string `json:"host"`
}

// lockPath takes path as this process's lock, taking over a lock left by a dead process
// on this host, and returns its release.
func lockPath(path string) (func(), error) {
	host, _ := os.Hostname()
	self, _ := json.Marshal(lockInfo{PID: os.Getpid(), Host: host})
	for attempt := 0; attempt < 3; attempt++ {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err == nil {
			_, err = f.Write(append(self, '\n'))
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				os.Remove(path)
				return nil, fmt.Errorf("lock %s: %w", path, err)
			}
			return func() { os.Remove(path) }, nil
		}
		if !errors.Is(err, os.ErrExist) {
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		var held lockInfo
		b, rerr := os.ReadFile(path)
		if rerr == nil && json.Unmarshal(b, &held) == nil && held.Host == host && !alive(held.PID) {
			os.Remove(path) // stale: its process is gone
			continue
		}
		return nil, fmt.Errorf("lock %s: held by pid %d on host %q; if no update or sft is writing this output, remove the lock file: %w",
			path, held.PID, held.Host, ErrLocked)
	}
	return nil, fmt.Errorf("lock %s: could not take over a stale lock: %w", path, ErrLocked)
}

func alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
