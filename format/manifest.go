package format

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"time"

	"github.com/mempo/mempo/internal/renameio"
)

// ManifestName is the file that commits a dataset directory. A directory is a dataset
// only once its manifest exists and lists every shard; readers trust nothing else.
const ManifestName = "_manifest.json"

// ErrNotDataset marks a directory without a valid manifest.
var ErrNotDataset = errors.New("not a dataset")

// ErrCorrupt marks a shard or manifest whose bytes do not match what was recorded.
var ErrCorrupt = errors.New("corrupt")

// Manifest is the commit record of a dataset directory (DESIGN.md §3).
type Manifest struct {
	Kind          Kind               `json:"kind"`
	SchemaVersion int                `json:"schema_version"`
	Stage         string             `json:"stage"`
	CacheKey      string             `json:"cache_key"`
	CodeVersion   string             `json:"code_version"`
	Config        json.RawMessage    `json:"config"`
	Seed          int64              `json:"seed"`
	Inputs        []Input            `json:"inputs"`
	Outputs       []Output           `json:"outputs"`
	Timings       Timings            `json:"timings"`
	Metrics       map[string]float64 `json:"metrics,omitempty"`
	Host          string             `json:"host"`
	Created       time.Time          `json:"created"`
}

// Input names one dataset (or checkpoint) a stage read, by path and digest.
type Input struct {
	Name   string `json:"name"`
	Path   string `json:"path"`
	Digest string `json:"digest"`
}

// Output is one shard file of the dataset.
type Output struct {
	File   string `json:"file"`
	SHA256 string `json:"sha256"`
	Bytes  int64  `json:"bytes"`
	Rows   int64  `json:"rows"`
}

// Timings records where a stage spent its time.
type Timings struct {
	TotalS    float64 `json:"total_s"`
	TokensPS  float64 `json:"tokens_per_s,omitempty"`
	PeakRSSMB float64 `json:"peak_rss_mb,omitempty"`
	// Phases is the seconds of each named phase of the stage's work (the log-prob
	// stage's passes, say), summed over every shard, resumed ones included.
	Phases map[string]float64 `json:"phases,omitempty"`
}

var shardName = regexp.MustCompile(`^part-[0-9]{5}\.parquet$`)

// ShardName is the file name of shard i: part-00000.parquet, part-00001.parquet, …
func ShardName(i int) string { return fmt.Sprintf("part-%05d.parquet", i) }

// Digest is the dataset digest: sha256 over the canonical JSON of the output list. It
// names the content, not the run, so timings and hosts do not change it.
func (m *Manifest) Digest() string {
	b, err := json.Marshal(m.Outputs)
	if err != nil {
		panic(err) // Outputs holds only strings and ints
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// Rows is the total row count over all shards.
func (m *Manifest) Rows() int64 {
	var n int64
	for _, o := range m.Outputs {
		n += o.Rows
	}
	return n
}

// readRecord reads the JSON commit record name in dir into v and returns its path. The
// record is untrusted input: a missing record (absent says what that means) or one that
// does not parse wraps errNot with the path.
func readRecord(dir, name, absent string, v any, errNot error) (string, error) {
	path := filepath.Join(dir, name)
	b, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return path, fmt.Errorf("%s: no %s%s: %w", dir, name, absent, errNot)
		}
		return path, fmt.Errorf("read %s: %w", path, err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return path, fmt.Errorf("read %s: %w: %w", path, err, errNot)
	}
	return path, nil
}

// ReadManifest reads and validates dir's manifest. It is untrusted input: every field a
// reader relies on is checked, and any failure wraps ErrNotDataset with the path.
func ReadManifest(dir string) (*Manifest, error) {
	var m Manifest
	path, err := readRecord(dir, ManifestName, "", &m, ErrNotDataset)
	if err != nil {
		return nil, err
	}
	if m.Kind == "" || m.SchemaVersion <= 0 {
		return nil, fmt.Errorf("read %s: missing kind or schema_version: %w", path, ErrNotDataset)
	}
	seen := map[string]bool{}
	for i, o := range m.Outputs {
		if !shardName.MatchString(o.File) || seen[o.File] {
			return nil, fmt.Errorf("read %s: output %d: file %q: want a unique part-NNNNN.parquet name: %w", path, i, o.File, ErrNotDataset)
		}
		if len(o.SHA256) != 64 || o.Bytes < 0 || o.Rows < 0 {
			return nil, fmt.Errorf("read %s: output %d (%s): bad sha256, bytes or rows: %w", path, i, o.File, ErrNotDataset)
		}
		seen[o.File] = true
	}
	return &m, nil
}

// WriteManifest writes m as dir's manifest through a temp file, fsync and rename, so a
// crash leaves either no manifest or a whole one.
func WriteManifest(dir string, m *Manifest) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return fmt.Errorf("write manifest %s: %w", dir, err)
	}
	return renameio.WriteFile(filepath.Join(dir, ManifestName), append(b, '\n'))
}
