package format

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
)

// PublishDir renames the complete directory tmp to target. A directory cannot be
// renamed over a non-empty one, so an existing target is first moved to old (the
// caller's name for it, beside target) and removed only after the new one is in place:
// a kill between the two renames leaves the complete tmp, which a rerun publishes. Steps
// after the rename are logged, not returned, because the output is committed by then.
func PublishDir(tmp, target, old string, log *slog.Logger) error {
	if err := os.RemoveAll(old); err != nil {
		return fmt.Errorf("publish %s: %w", target, err)
	}
	if _, err := os.Lstat(target); err == nil {
		if err := os.Rename(target, old); err != nil {
			return fmt.Errorf("publish %s: move the previous one aside: %w", target, err)
		}
	}
	if err := os.Rename(tmp, target); err != nil {
		return fmt.Errorf("publish %s: %w", target, err)
	}
	if err := Sync(filepath.Dir(target)); err != nil {
		log.Warn("published, but the parent directory was not synced", "dir", target, "err", err)
	}
	if err := os.RemoveAll(old); err != nil {
		log.Warn("could not remove the replaced output", "dir", old, "err", err)
	}
	return nil
}
