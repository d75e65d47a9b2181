package jobs

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/mempo/mempo/format"
	"github.com/mempo/mempo/internal/renameio"
)

// A checkpoint is the directory format.Commit describes: its files and the commit record
// checkpoint.json (format.CommitFile), written last. Every stage that writes one
// (init-model, sft, update) commits it through Begin and Artifact.Publish, which write
// the record; format reads and verifies it.

// CheckpointSchema is the schema line of every checkpoint's cache key; its version is
// format.CommitVersion's.
const CheckpointSchema = "checkpoint@1"

// checkSizes reports how dir differs from its record c: a file missing or resized.
// Sizes only, as the stage runtime checks a cache hit (a stat per file, never a re-hash
// of gigabytes); a stage that reads a file checks its digest as it reads
// (format.Commit.Verify, and qwen2.Load's streaming hash of the weights), and mempo
// verify checks them all.
func checkSizes(c *format.Commit, dir string) error {
	for _, f := range c.Files {
		fi, err := os.Stat(filepath.Join(dir, f.File))
		if err != nil {
			return fmt.Errorf("%s: %w", f.File, err)
		}
		if fi.Size() != f.Bytes {
			return fmt.Errorf("%s: %d bytes, record says %d", f.File, fi.Size(), f.Bytes)
		}
	}
	return nil
}

// WriteJSON writes v as indented JSON with a trailing newline, atomically.
func WriteJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return renameio.WriteFile(path, append(b, '\n'))
}

// CopyFile copies src to dst atomically (a checkpoint's tokenizer.json from its input).
func CopyFile(dst, src string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return fmt.Errorf("copy %s: %w", src, err)
	}
	return renameio.WriteFile(dst, b)
}
