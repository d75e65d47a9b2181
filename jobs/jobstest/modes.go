package jobstest

import (
	"io/fs"
	"path/filepath"
	"testing"

	"github.com/mempo/mempo/internal/renameio"
)

// CheckModes fails t for each file under dir whose permission bits are not
// renameio.FileMode (0644). Every committed file goes through internal/renameio; a file
// left with os.CreateTemp's 0600 would make a checkpoint or dataset unreadable to the
// colleague who evaluates it.
func CheckModes(t testing.TB, dir string) {
	t.Helper()
	n := 0
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		n++
		if got := info.Mode().Perm(); got != renameio.FileMode {
			t.Errorf("%s: mode %v, want %v", path, got, fs.FileMode(renameio.FileMode))
		}
		return nil
	})
	if err != nil {
		t.Fatalf("walk %s: %v", dir, err)
	}
	if n == 0 {
		t.Errorf("%s holds no files to check", dir)
	}
}
