package jobs

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
)

// leftoverInfixes name what writers of an output create beside it and remove when they
// finish: the temp dir of a key (".tmp-<key>", kept by a killed, interrupted or
// disk-full run so a rerun of that key resumes), the previous output moved aside during a publish
// (".old-<key>") and a --verify recomputation (".verify-<key>"). A writer holds the
// output's lock while any of them exists, so with the lock in hand they belong to no
// live writer.
var leftoverInfixes = []string{".tmp-", ".old-", ".verify-"}

// leftovers lists the directories beside target that earlier writers left, sorted:
// target's name, an infix and a short key (Key.Short), nothing else, so a user's
// dataset that merely starts with target's name is never taken for one.
func leftovers(target string) []string {
	entries, err := os.ReadDir(filepath.Dir(target))
	if err != nil {
		return nil
	}
	base := filepath.Base(target)
	var out []string
	for _, e := range entries {
		for _, infix := range leftoverInfixes {
			if key, ok := strings.CutPrefix(e.Name(), base+infix); ok && shortKey(key) {
				out = append(out, filepath.Join(filepath.Dir(target), e.Name()))
				break
			}
		}
	}
	return out
}

// shortKey reports whether s has the form of Key.Short: 12 lowercase hex digits.
func shortKey(s string) bool {
	if len(s) != 12 {
		return false
	}
	for _, c := range s {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// sweep removes, while the caller holds target's lock, what earlier writers of target
// left: the lock of a dead writer the caller took over (stale), every leftover
// directory but keep (the temp dir of the caller's key, which it resumes from), and
// extra. Every writer of a committed directory, dataset (Run) or checkpoint (Begin),
// calls it right after taking the lock. What it removed is reported on the log in one
// line. Failures are logged, not returned: a leftover that stays costs disk space, not
// correctness.
func sweep(log *slog.Logger, target string, stale *lockInfo, keep string, extra ...string) {
	var removed []string
	if stale != nil {
		removed = append(removed, fmt.Sprintf("%s.lock (pid %d, dead)", filepath.Base(target), stale.PID))
	}
	for _, p := range append(leftovers(target), extra...) {
		if p == keep {
			continue
		}
		if err := os.RemoveAll(p); err != nil {
			log.Warn("could not remove a leftover of an earlier run", "path", p, "err", err)
			continue
		}
		rel, err := filepath.Rel(filepath.Dir(target), p)
		if err != nil {
			rel = p
		}
		removed = append(removed, rel)
	}
	if len(removed) > 0 {
		log.Warn("removed leftovers of interrupted or failed runs", "dir", target, "removed", strings.Join(removed, ", "))
	}
}

// tidy is sweep for a cache hit, which otherwise writes nothing: only when target has
// leftovers (a lock, a leftover directory, or one of inside, the paths within the
// output that are leftovers when present) does it take the lock, so that a live
// writer's files are never touched, remove them and release it. The paths of inside go
// only if hit, asked with the lock held, says target still is the hit's output. A lock
// it cannot take leaves everything as it is; the hit stands either way.
func tidy(spec Spec, log *slog.Logger, target string, inside []string, hit func() bool) {
	present := func() []string {
		var ps []string
		for _, p := range inside {
			if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
				ps = append(ps, p)
			}
		}
		return ps
	}
	_, errLock := os.Lstat(target + ".lock")
	if len(leftovers(target)) == 0 && len(present()) == 0 && errors.Is(errLock, os.ErrNotExist) {
		return
	}
	release, stale, err := spec.takeLock(target, log)
	if err != nil {
		log.Debug("leftovers kept: the output is locked", "dir", target, "err", err)
		return
	}
	defer release()
	var extra []string
	if len(inside) > 0 && hit() {
		extra = present()
	}
	sweep(log, target, stale, "", extra...)
}

// sweep is the package's sweep for a dataset run holding target's lock.
func (r *runner) sweep(target string, stale *lockInfo, keep string) {
	sweep(r.log, target, stale, keep)
}

// tidy is the package's tidy for a dataset's cache hit: a run killed right after its
// rename kept its completion records inside the output, and they go too.
func (r *runner) tidy(target string, key Key) {
	tidy(r.spec, r.log, target, []string{filepath.Join(target, recordsDir)},
		func() bool { return r.cached(target, key) != nil })
}
