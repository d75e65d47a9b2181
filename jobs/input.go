package jobs

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
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

// CheckpointInput names a checkpoint input (a policy, the reference, an init model) by
// its commit record: the digest is "checkpoint:" and format.Commit.Digest, the sha256 of
// checkpoint.json's content without input paths; the record already lists every file's
// sha256, so a stage keys a checkpoint of gigabytes by reading one small file. The record must parse, and the files it lists must be
// there with their recorded sizes (a stat each, as a cache hit checks).
//
// A checkpoint mempo did not write — a Qwen2 directory from the HF hub, which has
// config.json but no commit record — has nothing to key it by but its bytes: it is
// named "dir:" and the sha256 over its files (dirDigest), as every checkpoint was
// before commit records. Any other directory without a valid record is an error
// naming it and wrapping format.ErrNotCheckpoint.
func CheckpointInput(name, dir string) (format.Input, error) {
	in := format.Input{Name: name, Path: filepath.Clean(dir)}
	if _, err := os.Stat(dir); err != nil {
		return format.Input{}, fmt.Errorf("input %s: %w", name, err)
	}
	c, err := format.ReadCommit(dir)
	if errors.Is(err, format.ErrNotCheckpoint) && foreign(dir) {
		sum, err := dirDigest(dir)
		if err != nil {
			return format.Input{}, fmt.Errorf("input %s: %w", name, err)
		}
		in.Digest = "dir:" + sum
		return in, nil
	}
	if err == nil {
		if err = checkSizes(c, dir); err != nil {
			err = fmt.Errorf("%s: %w: %w", dir, err, format.ErrNotCheckpoint)
		}
	}
	if err != nil {
		return format.Input{}, fmt.Errorf("input %s: %w", name, err)
	}
	in.Digest = "checkpoint:" + c.Digest()
	return in, nil
}

// hfConfigFile is the model config of an HF checkpoint (qwen2.ConfigFile, which jobs,
// below the model packages, cannot import): the mark of a checkpoint made elsewhere.
const hfConfigFile = "config.json"

// foreign reports whether dir is an HF checkpoint that no mempo stage committed: it
// has config.json and no commit record at all (a damaged record is not foreign, it is
// an error).
func foreign(dir string) bool {
	_, errRecord := os.Lstat(filepath.Join(dir, format.CommitFile))
	_, errConfig := os.Stat(filepath.Join(dir, hfConfigFile))
	return errors.Is(errRecord, os.ErrNotExist) && errConfig == nil
}

// DigestOf is the hex digest of an input without its scheme ("checkpoint:", "dir:",
// "dataset:", …): what rollouts record as policy_digest.
func DigestOf(in format.Input) string {
	_, sum, _ := strings.Cut(in.Digest, ":")
	return sum
}

// dirDigest is one digest over dir's regular files: sha256 of the sorted lines
// "<relative path> <sha256 of the file>". Names starting with "." are skipped (temp
// files, locks), and so is MetricsName (or its legacy name), the run record whose
// timings differ between identical runs: the digest is the content, not the leftovers
// or the clock of a writer.
func dirDigest(dir string) (string, error) {
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
		if !d.Type().IsRegular() || isMetrics(d.Name()) {
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
