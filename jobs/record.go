package jobs

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/mempo/mempo/format"
)

// recordsDir holds one completion record per finished shard inside a temp dir. It is
// removed after the commit; until then it is what lets a killed run resume.
const recordsDir = "_records"

// record says a shard file is complete: written by the stage, fsynced, hashed. It is
// written atomically after the file is durable, so a record never names a partial file.
type record struct {
	Shard   int     `json:"shard"` // index in the whole plan
	File    string  `json:"file"`
	SHA256  string  `json:"sha256"`
	Bytes   int64   `json:"bytes"`
	Rows    int64   `json:"rows"`
	Tokens  int64   `json:"tokens"`
	Seconds float64 `json:"seconds"`
	// Phases is the seconds of the shard's named phases (Work.Phase).
	Phases map[string]float64 `json:"phases,omitempty"`
}

func recordPath(dir, file string) string {
	return filepath.Join(dir, recordsDir, strings.TrimSuffix(file, filepath.Ext(file))+".json")
}

func (r record) output() format.Output {
	return format.Output{File: r.File, SHA256: r.SHA256, Bytes: r.Bytes, Rows: r.Rows}
}

// readRecord reads the record of file in dir. It is untrusted: a record from another
// shard, a torn write or a hand edit is an error, and the caller recomputes the shard.
func readRecord(dir, file string, shard int) (record, error) {
	b, err := os.ReadFile(recordPath(dir, file))
	if err != nil {
		return record{}, err
	}
	var rec record
	if err := json.Unmarshal(b, &rec); err != nil {
		return record{}, fmt.Errorf("record of %s: %w", file, err)
	}
	if rec.File != file || rec.Shard != shard || len(rec.SHA256) != 64 || rec.Bytes < 0 || rec.Rows < 0 {
		return record{}, fmt.Errorf("record of %s: names shard %d file %q, want shard %d", file, rec.Shard, rec.File, shard)
	}
	return rec, nil
}

// check re-hashes the recorded file and reports how it differs from the record.
func (rec record) check(dir string) error {
	path := filepath.Join(dir, rec.File)
	sum, n, err := hashFile(path)
	if err != nil {
		return err
	}
	if n != rec.Bytes || sum != rec.SHA256 {
		return fmt.Errorf("%s: %d bytes sha256 %s, record says %d bytes sha256 %s: %w",
			path, n, sum[:12], rec.Bytes, rec.SHA256[:12], format.ErrCorrupt)
	}
	return nil
}

// syncHash fsyncs a finished shard file and returns its sha256 and size.
func syncHash(path string) (string, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return "", 0, fmt.Errorf("sync %s: %w", path, err)
	}
	return hashReader(path, f)
}

func hashFile(path string) (string, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	return hashReader(path, f)
}

func hashReader(path string, r io.Reader) (string, int64, error) {
	h := sha256.New()
	n, err := io.Copy(h, r)
	if err != nil {
		return "", 0, fmt.Errorf("read %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}
