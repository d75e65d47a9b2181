package audit

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mempo/mempo/format"
)

// ErrNotFound marks a request for a path, group, question or turn the run does not have.
var ErrNotFound = errors.New("not found")

// ErrIncomplete marks a dataset directory that is not a committed dataset: no manifest,
// or a manifest listing a shard that is missing or of another size.
var ErrIncomplete = errors.New("incomplete dataset")

// Group kinds: the datasets of one iteration directory, in pipeline order.
var groupKinds = []format.Kind{format.KindRollouts, format.KindScores, format.KindLogprobs, format.KindAdvantages}

// DatasetInfo describes one dataset directory of the run.
type DatasetInfo struct {
	Path          string             `json:"path"` // relative to the run, slash-separated
	Kind          format.Kind        `json:"kind,omitempty"`
	SchemaVersion int                `json:"schema_version,omitempty"`
	Stage         string             `json:"stage,omitempty"`
	Rows          int64              `json:"rows"`
	Shards        int                `json:"shards"`
	Digest        string             `json:"digest,omitempty"`
	Config        json.RawMessage    `json:"config,omitempty"`
	Seed          int64              `json:"seed"`
	Inputs        []format.Input     `json:"inputs,omitempty"`
	Metrics       map[string]float64 `json:"metrics,omitempty"`
	Timings       format.Timings     `json:"timings"` // its phases too, where the stage times them
	Created       time.Time          `json:"created"`
	Error         string             `json:"error,omitempty"` // why it cannot be read
}

// CheckpointInfo describes one checkpoint directory of the run.
type CheckpointInfo struct {
	Path      string             `json:"path"`
	Stage     string             `json:"stage,omitempty"`
	Digest    string             `json:"digest,omitempty"`
	Files     int                `json:"files"`
	Bytes     int64              `json:"bytes"`
	Seed      int64              `json:"seed"`
	Inputs    []format.Input     `json:"inputs,omitempty"`
	Step      int64              `json:"step,omitempty"`
	Iteration int64              `json:"iteration,omitempty"`
	Config    json.RawMessage    `json:"config,omitempty"`  // trainer_state.json's resolved config
	Metrics   map[string]float64 `json:"metrics,omitempty"` // trainer_state.json's metrics
	Error     string             `json:"error,omitempty"`
}

// Group is one directory holding a rollouts dataset and its siblings (an RL iteration,
// or one evaluation cell): the unit the question view reads.
type Group struct {
	Path     string                 `json:"path"`
	Series   string                 `json:"series"` // the parent directory; groups of one series compare
	Iter     int                    `json:"iter"`   // N of an iter-N directory, 0 otherwise
	Datasets map[format.Kind]string `json:"datasets"`
	Policy   string                 `json:"policy,omitempty"` // the checkpoint beside them, if any
	Figures  map[string]float64     `json:"figures,omitempty"`
}

// Table is one markdown table of an evaluation report.
type Table struct {
	Header []string   `json:"header"`
	Rows   [][]string `json:"rows"`
}

// EvalReport is a results.md of the run, its tables parsed and its other lines kept.
type EvalReport struct {
	Path   string   `json:"path"`
	Tables []Table  `json:"tables"`
	Notes  []string `json:"notes"`
}

// Overview is everything the run directory holds, from manifests and commit records only.
type Overview struct {
	Run         string           `json:"run"`
	Datasets    []DatasetInfo    `json:"datasets"`
	Checkpoints []CheckpointInfo `json:"checkpoints"`
	Groups      []Group          `json:"groups"`
	Eval        []EvalReport     `json:"eval"`
}

// Scan walks the run directory root and describes its datasets, checkpoints, groups
// and evaluation reports. It reads manifests, commit records and trainer states, and
// stats each listed shard; it decodes no shard.
func Scan(root string) (*Overview, error) {
	o := &Overview{Run: root}
	st, err := os.Stat(root)
	if err != nil {
		return nil, fmt.Errorf("run %s: %w", root, err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("run %s: not a directory", root)
	}
	err = filepath.WalkDir(root, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return nil // an unreadable corner of the run hides only itself
		}
		if !e.IsDir() {
			if e.Name() == "results.md" {
				if r, err := readReport(root, path); err == nil {
					o.Eval = append(o.Eval, *r)
				}
			}
			return nil
		}
		if path != root && strings.HasPrefix(e.Name(), ".") {
			return fs.SkipDir
		}
		rel := relPath(root, path)
		switch {
		case exists(filepath.Join(path, format.ManifestName)) || hasShards(path):
			o.Datasets = append(o.Datasets, describeDataset(rel, path))
			return fs.SkipDir
		case exists(filepath.Join(path, format.CommitFile)):
			o.Checkpoints = append(o.Checkpoints, describeCheckpoint(rel, path))
			return fs.SkipDir
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("run %s: %w", root, err)
	}
	o.Groups = groups(o)
	return o, nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func hasShards(dir string) bool {
	m, _ := filepath.Glob(filepath.Join(dir, "part-*.parquet"))
	return len(m) > 0
}

// relPath is path relative to root, slash-separated; "." for root itself.
func relPath(root, path string) string {
	r, err := filepath.Rel(root, path)
	if err != nil {
		return path
	}
	return filepath.ToSlash(r)
}

// openChecked opens the dataset at dir and stats every shard its manifest lists, so a
// half-written or damaged directory is an error naming what is missing before any
// shard is decoded.
func openChecked(dir string) (*format.Dataset, error) {
	d, err := format.OpenDataset(dir)
	if errors.Is(err, format.ErrNotDataset) {
		return nil, fmt.Errorf("%w (not committed: a stage may still be writing it, or was killed): %w", err, ErrIncomplete)
	}
	if err != nil {
		return nil, err
	}
	if err := checkShards(d); err != nil {
		return nil, err
	}
	return d, nil
}

// checkShards stats every shard the manifest lists: present, and of the listed size.
func checkShards(d *format.Dataset) error {
	for i, out := range d.Manifest.Outputs {
		st, err := os.Stat(d.Path(i))
		switch {
		case errors.Is(err, os.ErrNotExist):
			return fmt.Errorf("%s: the manifest lists %s but it is missing: %w", d.Dir, out.File, ErrIncomplete)
		case err != nil:
			return fmt.Errorf("%s: %w", d.Path(i), err)
		case st.Size() != out.Bytes:
			return fmt.Errorf("%s: %s has %d bytes, the manifest says %d: %w", d.Dir, out.File, st.Size(), out.Bytes, ErrIncomplete)
		}
	}
	return nil
}

func describeDataset(rel, dir string) DatasetInfo {
	info := DatasetInfo{Path: rel}
	d, err := openChecked(dir)
	if d == nil {
		// Describe what the manifest says even when a shard is missing.
		if m, merr := format.ReadManifest(dir); merr == nil {
			d = &format.Dataset{Dir: dir, Manifest: m}
		}
	}
	if err != nil {
		info.Error = err.Error()
	}
	if d == nil {
		return info
	}
	m := d.Manifest
	info.Kind, info.SchemaVersion, info.Stage = m.Kind, m.SchemaVersion, m.Stage
	info.Rows, info.Shards, info.Digest = m.Rows(), len(m.Outputs), m.Digest()
	info.Config, info.Seed, info.Inputs, info.Metrics, info.Created = m.Config, m.Seed, m.Inputs, m.Metrics, m.Created
	info.Timings = m.Timings
	return info
}

func describeCheckpoint(rel, dir string) CheckpointInfo {
	info := CheckpointInfo{Path: rel}
	c, err := format.ReadCommit(dir)
	if err != nil {
		info.Error = err.Error()
		return info
	}
	info.Stage, info.Digest, info.Seed, info.Inputs = c.Stage, c.Digest(), c.Seed, c.Inputs
	info.Files = len(c.Files)
	for _, f := range c.Files {
		info.Bytes += f.Bytes
		if st, err := os.Stat(filepath.Join(dir, f.File)); err != nil || st.Size() != f.Bytes {
			info.Error = fmt.Sprintf("%s: %s missing or of another size than checkpoint.json records", rel, f.File)
		}
	}
	if s, err := format.ReadTrainerState(dir); err == nil {
		info.Step, info.Iteration, info.Config, info.Metrics = s.Step, s.Iteration, s.Config, s.Metrics
	}
	return info
}

// groups finds the directories holding a rollouts dataset and collects their siblings
// and figures (every sibling's manifest metrics, prefixed with its kind).
func groups(o *Overview) []Group {
	byDir := map[string]*Group{}
	for _, d := range o.Datasets {
		dir, base := pathSplit(d.Path)
		if d.Kind == "" || string(d.Kind) != base || !slices.Contains(groupKinds, d.Kind) {
			continue
		}
		g := byDir[dir]
		if g == nil {
			series, last := pathSplit(dir)
			g = &Group{Path: dir, Series: series, Datasets: map[format.Kind]string{}, Figures: map[string]float64{}}
			if n, ok := strings.CutPrefix(last, "iter-"); ok {
				g.Iter, _ = strconv.Atoi(n)
			}
			byDir[dir] = g
		}
		g.Datasets[d.Kind] = d.Path
		for k, v := range d.Metrics {
			g.Figures[string(d.Kind)+"."+k] = v
		}
	}
	for _, c := range o.Checkpoints {
		dir, _ := pathSplit(c.Path)
		if g := byDir[dir]; g != nil {
			g.Policy = c.Path
			for k, v := range c.Metrics {
				g.Figures["policy."+k] = v
			}
		}
	}
	var out []Group
	for _, g := range byDir {
		if g.Datasets[format.KindRollouts] != "" {
			out = append(out, *g)
		}
	}
	slices.SortFunc(out, func(a, b Group) int {
		if c := strings.Compare(a.Series, b.Series); c != 0 {
			return c
		}
		if a.Iter != b.Iter {
			return a.Iter - b.Iter
		}
		return strings.Compare(a.Path, b.Path)
	})
	return out
}

// pathSplit splits a slash-separated relative path into its directory ("." at the top)
// and last element.
func pathSplit(p string) (dir, base string) {
	i := strings.LastIndexByte(p, '/')
	if i < 0 {
		return ".", p
	}
	return p[:i], p[i+1:]
}

// readReport parses the markdown tables of an evaluation report; other non-empty lines
// are kept as notes.
func readReport(root, path string) (*EvalReport, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r := &EvalReport{Path: relPath(root, path)}
	var t *Table
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if !strings.HasPrefix(line, "|") {
			t = nil
			if line != "" {
				r.Notes = append(r.Notes, line)
			}
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		switch {
		case t == nil:
			r.Tables = append(r.Tables, Table{Header: cells})
			t = &r.Tables[len(r.Tables)-1]
		case isRule(cells):
		default:
			t.Rows = append(t.Rows, cells)
		}
	}
	return r, sc.Err()
}

func isRule(cells []string) bool {
	for _, c := range cells {
		if strings.Trim(c, "-: ") != "" {
			return false
		}
	}
	return true
}
