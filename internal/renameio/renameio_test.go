package renameio

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
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

func TestPublishDirSteps(t *testing.T) {
	for _, replace := range []bool{false, true} {
		t.Run(fmt.Sprintf("replace=%v", replace), func(t *testing.T) {
			dir := t.TempDir()
			tmp, target, old := filepath.Join(dir, "t.tmp"), filepath.Join(dir, "t"), filepath.Join(dir, "t.old")
			os.Mkdir(tmp, 0o755)
			if replace {
				os.Mkdir(target, 0o755)
			}
			var got []PublishStep
			trace := func(s PublishStep) {
				_, errOld := os.Stat(old)
				_, errTmp := os.Stat(tmp)
				if s == StepAside && (errOld != nil || errTmp != nil) || s == StepRenamed && errTmp == nil {
					t.Errorf("at step %s: old %v, tmp %v", s, errOld, errTmp)
				}
				got = append(got, s)
			}
			if err := PublishDir(tmp, target, old, slog.New(slog.DiscardHandler), trace); err != nil {
				t.Fatal(err)
			}
			want := []PublishStep{StepRenamed}
			if replace {
				want = []PublishStep{StepAside, StepRenamed}
			}
			if !slices.Equal(got, want) {
				t.Errorf("PublishDir steps = %v, want %v", got, want)
			}
		})
	}
}
