package jobs

import (
	"fmt"
	"path/filepath"

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
