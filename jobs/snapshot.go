package jobs

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/mempo/mempo/internal/renameio"
)

const (
	// resumeDir holds the resumable snapshots inside an artifact's temp dir; Publish
	// removes it before the commit.
	resumeDir = "_resume"
	// latestFile names the newest complete snapshot inside resumeDir; it is written
	// last, so it never names a partial one.
	latestFile = "latest.json"
	// cursorFile holds the caller's resume cursor inside a snapshot.
	cursorFile = "cursor.json"
)

type latest struct {
	Step int `json:"step"`
}

func (a *Artifact) snapshotDir(step int) string {
	return filepath.Join(a.Tmp, resumeDir, "step-"+strconv.Itoa(step))
}

// SaveSnapshot records a resumable state after step steps of this run: write fills a
// fresh directory with whatever the run needs to continue bit for bit (a trainer writes
// the weights and the optimizer state there; jobs stays free of tensor code), and the
// caller's cursor is stored beside it as JSON. The snapshot is complete and synced
// before latest.json names it; older snapshots are removed after.
func (a *Artifact) SaveSnapshot(step int, write func(dir string) error, cursor any) error {
	dir := a.snapshotDir(step)
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("snapshot %s: %w", dir, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("snapshot %s: %w", dir, err)
	}
	if err := write(dir); err != nil {
		return fmt.Errorf("snapshot %s: %w", dir, err)
	}
	if err := WriteJSON(filepath.Join(dir, cursorFile), cursor); err != nil {
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
	Dir  string // what SaveSnapshot's write filled, e.g. a checkpoint directory
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
		b, err = os.ReadFile(filepath.Join(s.Dir, cursorFile))
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
