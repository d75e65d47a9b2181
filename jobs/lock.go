package jobs

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"
)

// lockInfo is the content of <out>.lock: who holds the output and since when. Start
// (the process's start time) and Boot (the boot's id) tell the writer from a later
// process that reused its pid, as one does after a container restart.
type lockInfo struct {
	PID   int       `json:"pid"`
	Host  string    `json:"host"`
	Time  time.Time `json:"time"`
	Start string    `json:"start,omitempty"`
	Boot  string    `json:"boot,omitempty"`
}

// holder reports whether the writer a lock names is running.
type holder func(held lockInfo) bool

// liveHolder is the holder check of self's host: a lock of another boot, or one naming
// a pid that is gone, or alive but started at another time than the lock says, is
// stale. A lock with self's own pid and another start time (or none) was left by an
// earlier process whose pid self reused. alive says whether a pid runs; start is its
// start time. Locks written before Start and Boot existed are judged by the pid alone.
func liveHolder(self lockInfo, alive func(int) bool, start func(int) string) holder {
	return func(h lockInfo) bool {
		switch {
		case h.Boot != "" && self.Boot != "" && h.Boot != self.Boot:
			return false
		case h.PID == self.PID:
			return h.Start != "" && h.Start == self.Start
		case !alive(h.PID):
			return false
		case h.Start != "":
			return start(h.PID) == h.Start
		}
		return true
	}
}

// lock takes path as self's lock (acquire) and returns the function that releases it;
// a dead writer's lock it takes over is logged as a warning.
func lock(path string, self lockInfo, alive holder, log *slog.Logger) (release func(), err error) {
	release, stale, err := acquire(path, self, alive, log)
	if stale != nil {
		log.Warn("took over stale lock", "lock", path, "dead_pid", stale.PID, "since", stale.Time)
	}
	return release, err
}

// acquire takes path as self's lock and returns the function that releases it, and the
// lock of a dead writer it took over, if any, for the caller to report. The file is
// written completely under a temp name and hard-linked into place, so a lock file is
// never seen half-written and two takers cannot both succeed. A lock left by a writer
// on this host that no longer runs (alive) is taken over; a live one, or one from
// another host whose liveness cannot be checked, fails with ErrLocked.
func acquire(path string, self lockInfo, alive holder, log *slog.Logger) (release func(), stale *lockInfo, err error) {
	data, err := json.Marshal(self)
	if err != nil {
		return nil, nil, fmt.Errorf("lock %s: %w", path, err)
	}
	data = append(data, '\n')
	for attempt := 0; ; attempt++ {
		err := linkLock(path, data)
		if err == nil {
			return func() { unlock(path, data, log) }, stale, nil
		}
		if !errors.Is(err, os.ErrExist) {
			return nil, nil, fmt.Errorf("lock %s: %w", path, err)
		}
		held, raw, err := readLock(path)
		if errors.Is(err, os.ErrNotExist) && attempt < 3 {
			continue // released between our link and our read
		}
		if err != nil {
			return nil, nil, fmt.Errorf("lock %s: %w; if no stage is writing this output, remove the lock file: %w", path, err, ErrLocked)
		}
		if held.Host != self.Host {
			return nil, nil, fmt.Errorf("lock %s: held by pid %d on host %s since %s; if that process is gone, remove the lock file: %w",
				path, held.PID, held.Host, held.Time.Format(time.RFC3339), ErrLocked)
		}
		if alive(held) || attempt >= 3 {
			return nil, nil, fmt.Errorf("lock %s: held by running pid %d since %s: %w",
				path, held.PID, held.Time.Format(time.RFC3339), ErrLocked)
		}
		if err := takeOver(path, raw); err != nil {
			return nil, nil, fmt.Errorf("lock %s: take over stale lock of pid %d: %w", path, held.PID, err)
		}
		stale = &held
	}
}

func linkLock(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Link(tmp, path)
}

// readLock reads and parses a lock file; it is untrusted (a crash or a person may have
// left anything there).
func readLock(path string) (lockInfo, []byte, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return lockInfo{}, nil, err
	}
	var info lockInfo
	if err := json.Unmarshal(raw, &info); err != nil || info.PID <= 0 || info.Host == "" {
		return lockInfo{}, raw, fmt.Errorf("unreadable lock file (%q)", truncate(raw, 80))
	}
	return info, raw, nil
}

// takeOver moves the stale lock aside, then checks that what it moved is the stale lock
// it read: if another process took the lock over in between, its lock is put back and
// the next attempt sees it as live.
func takeOver(path string, stale []byte) error {
	aside := fmt.Sprintf("%s.stale-%d", path, os.Getpid())
	if err := os.Rename(path, aside); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return err
	}
	defer os.Remove(aside)
	moved, err := os.ReadFile(aside)
	if err == nil && !bytes.Equal(moved, stale) {
		os.Link(aside, path) // someone else's fresh lock: restore it
	}
	return nil
}

// unlock removes the lock if it is still ours; failures are logged, since the output is
// already committed (or not) by then.
func unlock(path string, data []byte, log *slog.Logger) {
	raw, err := os.ReadFile(path)
	if err != nil || !bytes.Equal(raw, data) {
		log.Warn("lock changed hands before release; left in place", "lock", path, "err", err)
		return
	}
	if err := os.Remove(path); err != nil {
		log.Warn("release lock", "lock", path, "err", err)
	}
}

func truncate(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "…"
	}
	return string(b)
}
