package renameio

import (
	"errors"
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

// TestWriteFile: the file is replaced whole with mode 0644 (not CreateTemp's 0600), and a
// fill that fails leaves the old content and no temp file behind.
func TestWriteFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "config.json")
	if err := os.WriteFile(path, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(path, []byte("new")); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); string(b) != "new" || fi.Mode().Perm() != FileMode {
		t.Errorf("after WriteFile: %q mode %v, want \"new\" mode %v", b, fi.Mode().Perm(), os.FileMode(FileMode))
	}
	boom := errors.New("boom")
	err = Write(path, func(w io.Writer) error {
		w.Write([]byte("torn"))
		return boom
	})
	if !errors.Is(err, boom) {
		t.Errorf("Write with a failing fill = %v, want it wrapped", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "new" {
		t.Errorf("after a failed Write the file holds %q, want \"new\"", b)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("after a failed Write the directory holds %d entries, want only the file", len(entries))
	}
}

func TestProcessAlive(t *testing.T) {
	if !ProcessAlive(os.Getpid()) {
		t.Error("ProcessAlive(self) = false")
	}
	if ProcessAlive(0) || ProcessAlive(-1) {
		t.Error("ProcessAlive of a non-positive pid = true")
	}
}
