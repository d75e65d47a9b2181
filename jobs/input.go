package jobs

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"path/filepath"
	"sort"
	"strings"

	"github.com/mempo/mempo/format"
)

// FileInput names a plain input file (JSONL questions, a corpus) by the sha256 of its
// bytes, for Spec.Inputs.
func FileInput(name, path string) (format.Input, error) {
	sum, _, err := hashFile(path)
	if err != nil {
		return format.Input{}, fmt.Errorf("input %s: %w", name, err)
	}
	return format.Input{Name: name, Path: filepath.Clean(path), Digest: "sha256:" + sum}, nil
}

// DatasetInput names an input dataset by its digest. A directory without a valid
// manifest is not a dataset, whatever files it holds, and is an error naming it.
func DatasetInput(name, dir string) (format.Input, error) {
	m, err := format.ReadManifest(dir)
	if err != nil {
		return format.Input{}, fmt.Errorf("input %s: %w", name, err)
	}
	return format.Input{Name: name, Path: filepath.Clean(dir), Digest: "dataset:" + m.Digest()}, nil
}

// DirInput names a directory input that is not a dataset — a model checkpoint, a
// search index — by one digest over its regular files: sha256 of the sorted lines
// "<relative path> <sha256 of the file>". Names starting with "." are skipped (temp
// files, locks), and so is MetricsName, the run record whose timings differ between
// identical runs: the digest is the content, not the leftovers or the clock of a writer.
func DirInput(name, dir string) (format.Input, error) {
	sum, err := DirDigest(dir)
	if err != nil {
		return format.Input{}, fmt.Errorf("input %s: %w", name, err)
	}
	return format.Input{Name: name, Path: filepath.Clean(dir), Digest: "dir:" + sum}, nil
}

// DirDigest is DirInput's digest of dir, e.g. the policy_digest rollouts record.
func DirDigest(dir string) (string, error) {
	var lines []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if path != dir && strings.HasPrefix(d.Name(), ".") {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() || d.Name() == MetricsName {
			return nil
		}
		sum, _, err := hashFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		lines = append(lines, filepath.ToSlash(rel)+" "+sum)
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("digest %s: %w", dir, err)
	}
	if len(lines) == 0 {
		return "", fmt.Errorf("digest %s: no files", dir)
	}
	sort.Strings(lines)
	h := sha256.Sum256([]byte(strings.Join(lines, "\n") + "\n"))
	return hex.EncodeToString(h[:]), nil
}
