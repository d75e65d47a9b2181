package search

import (
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/mempo/mempo/internal/renameio"
)

// The index is built in "<dir>.tmp-<pid>" beside its target and renamed into place
// once complete (cmd/go/internal/renameio, containerd's content writer). A directory
// being replaced is first moved to "<dir>.old-<pid>". A killed build leaves only
// these scratch directories, which the next build removes once their pid is gone.
const (
	tmpInfix = ".tmp-"
	oldInfix = ".old-"
)

// syncTree fsyncs every file and directory under root, deepest first, so the rename
// that publishes root never exposes a directory whose contents are not on disk.
func syncTree(root string) error {
	var dirs []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			dirs = append(dirs, path)
			return nil
		}
		return renameio.Sync(path)
	})
	if err != nil {
		return err
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := renameio.Sync(dirs[i]); err != nil {
			return err
		}
	}
	return nil
}

// publish renames the complete directory tmp to dir (renameio.PublishDir), moving an
// existing index aside under this process's name.
func publish(tmp, dir string, log *slog.Logger) error {
	return renameio.PublishDir(tmp, dir, dir+oldInfix+strconv.Itoa(os.Getpid()), log)
}

// removeStale deletes scratch directories of earlier builds of dir whose process
// is gone. Directories of a live process (a concurrent build) are left alone.
func removeStale(dir string, log *slog.Logger) {
	for _, infix := range []string{tmpInfix, oldInfix} {
		matches, _ := filepath.Glob(globEscape(dir) + infix + "*")
		for _, m := range matches {
			pid, err := strconv.Atoi(strings.TrimPrefix(m, dir+infix))
			if err != nil || pid == os.Getpid() || renameio.ProcessAlive(pid) {
				continue
			}
			if err := os.RemoveAll(m); err != nil {
				log.Warn("could not remove scratch directory of an earlier build", "dir", m, "err", err)
				continue
			}
			log.Info("removed scratch directory of an interrupted build", "dir", m)
		}
	}
}

// globEscape quotes the glob metacharacters of a literal path.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
