// Package renameio writes files and publishes directories so that a crash leaves either
// the old content or the whole new one under the final name, never a torn file. Every
// committed file of mempo — shards, manifests, checkpoints, tokenizers, indexes — goes
// through it, so all of them are synced the same way and have the same mode (0644:
// outputs are meant to be read by other users and tools).
package renameio

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
)

// FileMode is the mode of every file written here. os.CreateTemp makes 0600 files,
// which would leave a checkpoint unreadable to the colleague who evaluates it.
const FileMode = 0o644

// WriteFile writes data to path atomically (see Write).
func WriteFile(path string, data []byte) error {
	return Write(path, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// Write fills a temp file beside path through a buffered writer, fsyncs it, sets its
// mode to FileMode, renames it over path and fsyncs the directory. On any error the
// temp file is removed and path is left as it was.
func Write(path string, fill func(w io.Writer) error) error {
	return WriteAs(path, "."+filepath.Base(path)+".tmp-*", fill)
}

// WriteAs is Write with the temp file named by pattern (os.CreateTemp's): for a
// directory a tool watches by file name, a temp name the tool does not match.
func WriteAs(path, pattern string, fill func(w io.Writer) error) (err error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, pattern)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
			err = fmt.Errorf("write %s: %w", path, err)
		}
	}()
	if err := f.Chmod(FileMode); err != nil {
		return err
	}
	bw := bufio.NewWriterSize(f, 1<<20)
	if err := fill(bw); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return err
	}
	return Sync(dir)
}

// Sync fsyncs a file, or a directory so that renames inside it are durable.
func Sync(path string) error {
	d, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("sync %s: %w", path, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", path, err)
	}
	return nil
}

// PublishStep names a point inside PublishDir, reported to the caller's trace.
type PublishStep string

const (
	// StepAside: the previous target is at old and tmp not yet renamed; a kill here
	// leaves no target, the complete tmp and the previous output at old.
	StepAside PublishStep = "aside"
	// StepRenamed: tmp is the target and old not yet removed; a kill here leaves the
	// complete target and the previous output at old.
	StepRenamed PublishStep = "renamed"
)

// PublishDir renames the complete directory tmp to target. A directory cannot be
// renamed over a non-empty one, so an existing target is first moved to old (the
// caller's name for it, beside target) and removed only after the new one is in place:
// a kill between the two renames leaves the complete tmp, which a rerun publishes. Steps
// after the rename are logged, not returned, because the output is committed by then.
// Each trace function, when given, is called at every PublishStep, so tests can kill
// the process between the renames.
func PublishDir(tmp, target, old string, log *slog.Logger, trace ...func(PublishStep)) error {
	step := func(s PublishStep) {
		for _, t := range trace {
			t(s)
		}
	}
	if err := os.RemoveAll(old); err != nil {
		return fmt.Errorf("publish %s: %w", target, err)
	}
	if _, err := os.Lstat(target); err == nil {
		if err := os.Rename(target, old); err != nil {
			return fmt.Errorf("publish %s: move the previous one aside: %w", target, err)
		}
		step(StepAside)
	}
	if err := os.Rename(tmp, target); err != nil {
		return fmt.Errorf("publish %s: %w", target, err)
	}
	step(StepRenamed)
	if err := Sync(filepath.Dir(target)); err != nil {
		log.Warn("published, but the parent directory was not synced", "dir", target, "err", err)
	}
	if err := os.RemoveAll(old); err != nil {
		log.Warn("could not remove the replaced output", "dir", old, "err", err)
	}
	return nil
}

// ProcessAlive reports whether pid runs on this host. EPERM means it exists but belongs
// to another user, which still makes it alive (its locks and scratch directories stay).
func ProcessAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
