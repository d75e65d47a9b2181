package format

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
)

// TestPublishDir: the new directory replaces an existing one whole, the one moved aside
// is gone afterwards, and a first publish needs no target.
func TestPublishDir(t *testing.T) {
	dir := t.TempDir()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	target, old := filepath.Join(dir, "out"), filepath.Join(dir, "out.old")
	for i, content := range []string{"first", "second"} {
		tmp := filepath.Join(dir, "tmp")
		if err := os.MkdirAll(tmp, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(tmp, content), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := PublishDir(tmp, target, old, log); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
		entries, err := os.ReadDir(target)
		if err != nil || len(entries) != 1 || entries[0].Name() != content {
			t.Fatalf("after publish %d, %s holds %v (%v); want only %q", i, target, entries, err, content)
		}
		for _, gone := range []string{tmp, old} {
			if _, err := os.Lstat(gone); !os.IsNotExist(err) {
				t.Errorf("after publish %d, %s still exists (%v)", i, gone, err)
			}
		}
	}
}
