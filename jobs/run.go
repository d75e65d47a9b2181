// Package jobs is the runtime every stage binary runs under (DESIGN.md §4): it keys a
// stage's output by everything it depends on, returns a cache hit without work, runs
// the stage's shard plan under a lock in a temp dir named by the key, records each
// finished shard so a killed run resumes, and commits by rename with the manifest as
// the commit record. The next run of an output, a cache hit included, removes what
// writers that are no longer alive left beside it: their lock, temp dirs of other
// keys, a previous output moved aside (leftover.go). Checkpoints are committed the same
// way (Begin, Artifact.Publish, snapshots for resume), with checkpoint.json
// (format.Commit) as their commit record, under the same lock and keyed by the same
// KeySpec. Given a Board, each output's metrics, published or found cached, also go to
// a TensorBoard log directory (board.go). It deals in files, digests and records; stages write their shard and
// weight files with whatever writer they use.
package jobs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/mempo/mempo/format"
	"github.com/mempo/mempo/internal/procstat"
	"github.com/mempo/mempo/internal/renameio"
)

// Error classes, matched with errors.Is. Messages put the output, file or flag first.
var (
	// ErrLocked: another live process holds the output's lock file.
	ErrLocked = errors.New("output locked by another writer")
	// ErrVerify: --verify recomputed a cache hit and got a different output digest.
	ErrVerify = errors.New("output not reproducible")
	// ErrIncomplete: a merge found a part missing or computed from another key.
	ErrIncomplete = errors.New("parts incomplete")
	// ErrSpec: the stage or its caller asked for something malformed (bad --shard, no --out).
	ErrSpec = errors.New("invalid stage spec")
	// ErrTransient marks a stage's failure of something outside it (a server that
	// stopped answering) that a rerun of the same key may not meet: the run keeps its
	// finished shards for that rerun, as after an interrupt or a full disk.
	ErrTransient = errors.New("transient failure")
)

// DiskFull adds the fix to an error caused by a full disk (ENOSPC, EDQUOT): nothing was
// published; free space and rerun. kept, when not "", is the temp dir whose finished
// work (a dataset's shards, a training run's last snapshot) the rerun continues from.
// Every stage that writes a dataset or a checkpoint reports a full disk through it.
func DiskFull(err error, kept string) error {
	switch {
	case !errors.Is(err, syscall.ENOSPC) && !errors.Is(err, syscall.EDQUOT):
		return err
	case kept == "":
		return fmt.Errorf("%w (disk full: nothing was published; free space and rerun)", err)
	}
	return fmt.Errorf("%w (disk full: nothing was published; free space and rerun, finished work is kept in %s)", err, kept)
}

// Spec says what a stage computes and where. Everything that changes the output bytes
// (stage, code, kind, config, inputs, seed, plan size) enters the cache key; everything
// else (where progress and metrics go, Force, Verify) does not.
type Spec struct {
	Stage         string      // stage name, e.g. "rollout"
	Kind          format.Kind // shard kind of the output
	SchemaVersion int         // schema version of Kind
	Config        any         // the stage's resolved Config; its canonical JSON is keyed and stored
	Seed          int64
	Inputs        []format.Input // datasets and files read, by digest
	// Shards is the size of the shard plan, declared before any work so a rerun knows
	// what is left and a part knows its slice. Shard g's bytes must depend only on g and
	// the keyed inputs, never on which part or process computes it.
	Shards int

	Out    string // dataset directory
	Force  bool   // recompute even on a cache hit
	Verify bool   // on a cache hit, recompute into a temp dir and fail if the digest differs
	Part   Part   // compute only this slice, into <Out>/_parts/i-of-N/
	Merge  int    // instead of computing, build Out from its Merge parts (Verify does not apply)

	Log           *slog.Logger // structured log; nil discards
	Stdout        io.Writer    // where the one-line cache-hit or done message goes; nil discards
	Progress      Progress     // progress display mode
	ProgressOut   io.Writer    // where progress goes (stderr); nil disables progress
	ProgressEvery time.Duration
	KeyDebug      io.Writer        // when set, receives the cache key's preimage (MEMPO_DEBUG=keyhash)
	Now           func() time.Time // clock; nil is time.Now
	Host          string           // host name for locks and the manifest; "" is os.Hostname
	// Board, when its Dir is set, also gets the metrics of the published output, or of
	// the output found cached, as a TensorBoard event file (board.go).
	Board Board
	// Summarize, when set, computes the stage's summary figures (e.g. advantage
	// statistics) from the finished shards in dir before the manifest is written; they
	// join the manifest's metrics. Merged parts are not summarized.
	Summarize func(dir string, outputs []format.Output) (map[string]float64, error)
	// Trace, when set, is called at each step of a run. Tests use it to kill the process
	// at exact points; it must not modify the output.
	Trace func(step Step, shard int)

	// Test seams: file writes of records and manifests, and the liveness check of a
	// lock holder.
	writeFile func(path string, data []byte) error
	alive     func(pid int) bool
	start     func(pid int) string
}

// WithDefaults fills the optional runtime fields: a discarding log and stdout, the wall
// clock and this host's name. Checkpoint writers (Begin) start from it too.
func (s Spec) WithDefaults() Spec {
	if s.Log == nil {
		s.Log = slog.New(slog.DiscardHandler)
	}
	if s.Stdout == nil {
		s.Stdout = io.Discard
	}
	if s.Now == nil {
		s.Now = time.Now
	}
	if s.Host == "" {
		var err error
		if s.Host, err = os.Hostname(); err != nil {
			s.Host = "localhost"
		}
	}
	if s.writeFile == nil {
		s.writeFile = renameio.WriteFile
	}
	if s.alive == nil {
		s.alive = renameio.ProcessAlive
	}
	if s.start == nil {
		s.start = procstat.StartTime
	}
	return s
}

// lock takes the lock of the output dir for this process (lock.go), as every writer of
// a committed directory does; a dead writer's lock is taken over with a warning.
func (s Spec) lock(dir string, log *slog.Logger) (release func(), err error) {
	self := s.lockInfo()
	return lock(dir+".lock", self, liveHolder(self, s.alive, s.start), log)
}

// takeLock is lock that returns the dead writer's lock it took over instead of
// logging it, for a caller that reports it with the rest of that writer's leftovers.
func (s Spec) takeLock(dir string, log *slog.Logger) (release func(), stale *lockInfo, err error) {
	self := s.lockInfo()
	return acquire(dir+".lock", self, liveHolder(self, s.alive, s.start), log)
}

func (s Spec) lockInfo() lockInfo {
	pid := os.Getpid()
	start := procstat.StartTime
	if s.start != nil {
		start = s.start
	}
	return lockInfo{PID: pid, Host: s.Host, Time: s.Now().UTC(), Start: start(pid), Boot: procstat.BootID()}
}

// Step names a point in a run, reported to Spec.Trace.
type Step string

const (
	StepRows      Step = "rows"                     // the stage reported rows inside a shard (Work.Add)
	StepWritten   Step = "written"                  // the stage's function returned; file not yet recorded
	StepRecorded  Step = "recorded"                 // the shard's completion record is durable
	StepCommit    Step = "commit"                   // every shard verified; writing metrics and manifest
	StepManifest  Step = "manifest"                 // manifest durable in the temp dir; rename next
	StepAside     Step = Step(renameio.StepAside)   // the previous output moved aside; temp dir not yet renamed
	StepRenamed   Step = Step(renameio.StepRenamed) // the temp dir renamed; the previous output not yet removed
	StepPublished Step = "published"                // the temp dir was renamed over the output
)

// Result says what Run did.
type Result struct {
	Dir      string // the directory written or found: Out, or the part's directory
	Key      Key
	Hit      bool // output was already there with the same key
	Verified bool // a hit was recomputed and matched
	Resumed  int  // shards taken from an earlier, interrupted run
	Manifest *format.Manifest
}

// Work is one shard of the plan, handed to the stage's function. The function writes
// Path (creating it; any earlier partial file is already gone) and reports rows and
// tokens with Add; when it returns nil, jobs fsyncs, hashes and records the file.
type Work struct {
	Shard  int    // index in the whole plan
	Path   string // file to write
	rows   int64
	token  int64
	phases map[string]float64
	run    *runner
}

// Add reports rows and tokens written so far in this shard, for the manifest, the
// progress display and tokens/s.
func (w *Work) Add(rows, tokens int64) {
	w.rows += rows
	w.token += tokens
	w.run.progress.Add(0, rows, tokens)
	w.run.trace(StepRows, w.Shard)
}

// Phase adds seconds to the named phase of this shard's work: the shard's line of
// MetricsName lists its phases, and the manifest's Timings.Phases sums them over the
// shards, resumed ones included.
func (w *Work) Phase(name string, seconds float64) {
	addPhases(&w.phases, map[string]float64{name: seconds})
}

// WorkFunc computes one shard.
type WorkFunc func(ctx context.Context, w *Work) error

// Run makes spec.Out (or its part) hold the output of spec, calling fn for each shard
// that is not already done. A dataset becomes visible only by the rename that publishes
// a temp dir already holding its manifest, so a killed Run never leaves a directory
// that looks complete; a rerun of the same spec finds the temp dir by key and computes
// only the shards without completion records.
func Run(ctx context.Context, spec Spec, fn WorkFunc) (*Result, error) {
	r, err := newRunner(spec)
	if err != nil {
		return nil, err
	}
	var res *Result
	if spec.Merge > 0 {
		res, err = r.merge(ctx)
	} else {
		res, err = r.run(ctx, fn)
	}
	if err == nil {
		r.logBoard(res)
	}
	return res, err
}

// runner is one Run: the spec with defaults filled in and what is derived from it.
type runner struct {
	spec     Spec
	log      *slog.Logger
	now      func() time.Time
	code     string
	config   []byte // canonical JSON
	progress *Reporter
}

func newRunner(spec Spec) (*runner, error) {
	switch {
	case spec.Stage == "":
		return nil, fmt.Errorf("spec: no stage name: %w", ErrSpec)
	case spec.Out == "":
		return nil, fmt.Errorf("stage %s: no output directory (--out): %w", spec.Stage, ErrSpec)
	case spec.Kind == "" || spec.SchemaVersion <= 0:
		return nil, fmt.Errorf("stage %s: no output kind or schema version: %w", spec.Stage, ErrSpec)
	case spec.Shards < 0:
		return nil, fmt.Errorf("stage %s: %d shards: %w", spec.Stage, spec.Shards, ErrSpec)
	case spec.Merge > 0 && !spec.Part.Whole():
		return nil, fmt.Errorf("stage %s: --merge with --shard %s: a merge builds the whole output: %w", spec.Stage, spec.Part, ErrSpec)
	}
	if err := spec.Part.validate(); err != nil {
		return nil, fmt.Errorf("stage %s: %w", spec.Stage, err)
	}
	config, err := CanonicalJSON(spec.Config)
	if err != nil {
		return nil, fmt.Errorf("stage %s: encode config: %w", spec.Stage, err)
	}
	spec = spec.WithDefaults()
	r := &runner{spec: spec, log: spec.Log.With("stage", spec.Stage), now: spec.Now, code: CodeVersion(), config: config}
	if r.spec.Inputs == nil {
		r.spec.Inputs = []format.Input{}
	}
	return r, nil
}

func (r *runner) trace(step Step, shard int) {
	if r.spec.Trace != nil {
		r.spec.Trace(step, shard)
	}
}

// PartsDir is the folder under Out that holds the parts of a sharded run. Its leading
// "_" makes Arrow readers (pyarrow.dataset, pandas, DuckDB globs) skip it, so a
// merged dataset read as a directory does not count the parts' rows twice.
const PartsDir = "_parts"

// target is the directory this run publishes: Out, or the part's directory under it.
func (r *runner) target() string {
	if r.spec.Part.Whole() {
		return r.spec.Out
	}
	return filepath.Join(r.spec.Out, PartsDir, r.spec.Part.dir())
}

func (r *runner) run(ctx context.Context, fn WorkFunc) (*Result, error) {
	key := r.key(r.spec.Part)
	dir := r.target()
	res := &Result{Dir: dir, Key: key}
	if m := r.cached(dir, key); m != nil && !r.spec.Force && !r.spec.Verify {
		r.tidy(dir, key)
		return r.hit(res, m), nil
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return nil, fmt.Errorf("stage %s: %w", r.spec.Stage, err)
	}
	release, stale, err := r.spec.takeLock(dir, r.log)
	if err != nil {
		return nil, fmt.Errorf("stage %s: %w", r.spec.Stage, err)
	}
	defer release()
	// Holding the lock, no other writer of dir is alive: what earlier ones left is
	// removed, except this key's temp dir, which holds the shards this run resumes.
	r.sweep(dir, stale, dir+".tmp-"+key.Short())
	// Another writer may have committed while we waited for the lock.
	if m := r.cached(dir, key); m != nil && !r.spec.Force {
		if r.spec.Verify {
			if err := r.verify(ctx, dir, key, m, fn); err != nil {
				return nil, err
			}
			res.Verified = true
		}
		return r.hit(res, m), nil
	}
	return r.compute(ctx, res, fn)
}

func (r *runner) hit(res *Result, m *format.Manifest) *Result {
	res.Hit, res.Manifest = true, m
	r.log.Info("cache hit", "dir", res.Dir, "key", res.Key.Short(), "digest", m.Digest()[:12])
	verified := ""
	if res.Verified {
		verified = ", verified"
	}
	fmt.Fprintf(r.spec.Stdout, "%s: cache hit: %s (key %s, %d rows in %d shards%s)\n",
		r.spec.Stage, res.Dir, res.Key.Short(), m.Rows(), len(m.Outputs), verified)
	return res
}

// cached returns dir's manifest if it is a complete output of key. Anything else is a
// miss, logged with its reason: a corrupt or partial earlier output is recomputed, never
// trusted and never a crash.
func (r *runner) cached(dir string, key Key) *format.Manifest {
	if _, err := os.Lstat(filepath.Join(dir, format.ManifestName)); errors.Is(err, os.ErrNotExist) {
		return nil // nothing there yet: a plain miss, not worth a log line
	}
	m, err := format.ReadManifest(dir)
	if err != nil {
		r.log.Info("cache miss", "dir", dir, "reason", err)
		return nil
	}
	if m.CacheKey != key.String() {
		r.log.Info("cache miss", "dir", dir, "reason", "cache key differs", "have", short(m.CacheKey), "want", key.Short())
		return nil
	}
	for _, o := range m.Outputs {
		fi, err := os.Stat(filepath.Join(dir, o.File))
		if err != nil || fi.Size() != o.Bytes {
			r.log.Info("cache miss", "dir", dir, "reason", "shard missing or resized", "file", o.File)
			return nil
		}
	}
	return m
}

func short(s string) string {
	if len(s) > 12 {
		return s[:12]
	}
	return s
}
