package jobs

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/mempo/mempo/format"
	"github.com/mempo/mempo/internal/procstat"
	"github.com/mempo/mempo/internal/renameio"
)

// testSpec is a small spec whose shards testWork computes.
func testSpec(out string) Spec {
	return Spec{
		Stage: "test", Kind: "probe", SchemaVersion: 1,
		Config: map[string]any{"rows": 10, "width": 3},
		Seed:   7,
		Inputs: []format.Input{{Name: "prompts", Path: "in/prompts", Digest: "sha256:00"}},
		Shards: 5,
		Out:    out,
		Now:    fakeClock(),
	}
}

// fakeClock advances one second per call, so timings are positive and deterministic.
func fakeClock() func() time.Time {
	t := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	return func() time.Time {
		t = t.Add(time.Second)
		return t
	}
}

// counter counts calls per shard.
type counter map[int]int

func (c counter) shards() []int {
	var s []int
	for g := range c {
		s = append(s, g)
	}
	sort.Ints(s)
	return s
}

// testWork writes rows that depend only on the shard index and seed.
func testWork(seed int64, calls counter) WorkFunc {
	return func(ctx context.Context, w *Work) error {
		calls[w.Shard]++
		var b bytes.Buffer
		for i := range 3 + w.Shard {
			fmt.Fprintf(&b, "seed %d shard %d row %d\n", seed, w.Shard, i)
		}
		w.Add(int64(3+w.Shard), int64(10*(3+w.Shard)))
		w.Phase("write", 0.5)
		w.Phase("write", float64(w.Shard)) // phases add up within a shard too
		return os.WriteFile(w.Path, b.Bytes(), 0o644)
	}
}

func mustRun(t *testing.T, spec Spec, fn WorkFunc) *Result {
	t.Helper()
	res, err := Run(context.Background(), spec, fn)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	return res
}

// listDir names what is beside and inside out, to show nothing half-done is left.
func listDir(t *testing.T, dir string) []string {
	t.Helper()
	var names []string
	filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && path != dir {
			rel, _ := filepath.Rel(dir, path)
			names = append(names, rel)
		}
		return nil
	})
	return names
}

func TestRunCommitsDataset(t *testing.T) {
	root := t.TempDir()
	out := filepath.Join(root, "out")
	calls := counter{}
	res := mustRun(t, testSpec(out), testWork(7, calls))
	if res.Hit || res.Resumed != 0 {
		t.Errorf("first Run: Hit %v Resumed %d, want false 0", res.Hit, res.Resumed)
	}
	if diff := cmp.Diff([]int{0, 1, 2, 3, 4}, calls.shards()); diff != "" {
		t.Errorf("shards computed (-want +got):\n%s", diff)
	}
	m, err := format.ReadManifest(out)
	if err != nil {
		t.Fatal(err)
	}
	var config bytes.Buffer
	json.Compact(&config, m.Config)
	if m.CacheKey != res.Key.String() || m.Kind != "probe" || m.Seed != 7 || config.String() != `{"rows":10,"width":3}` {
		t.Errorf("manifest = key %s kind %s seed %d config %s", m.CacheKey, m.Kind, m.Seed, m.Config)
	}
	if got, want := m.Rows(), int64(3+4+5+6+7); got != want {
		t.Errorf("Rows() = %d, want %d", got, want)
	}
	if m.Metrics["tokens"] != 250 || m.Timings.TokensPS <= 0 || m.Timings.TotalS <= 0 {
		t.Errorf("metrics = %v, timings %+v", m.Metrics, m.Timings)
	}
	if diff := cmp.Diff(map[string]float64{"write": writeSeconds(5)}, m.Timings.Phases); diff != "" {
		t.Errorf("manifest phases (-want +got):\n%s", diff)
	}
	for _, o := range m.Outputs {
		sum, n, err := hashFile(filepath.Join(out, o.File))
		if err != nil || sum != o.SHA256 || n != o.Bytes {
			t.Errorf("%s: sha256 %s bytes %d err %v, manifest %s %d", o.File, sum, n, err, o.SHA256, o.Bytes)
		}
	}
	// Every file besides the shards starts with "_", so Arrow readers (pyarrow.dataset,
	// pandas.read_parquet) open the directory as a Parquet dataset.
	want := []string{"_manifest.json", "_metrics.jsonl", "part-00000.parquet", "part-00001.parquet",
		"part-00002.parquet", "part-00003.parquet", "part-00004.parquet"}
	if diff := cmp.Diff(want, listDir(t, out)); diff != "" {
		t.Errorf("output files (-want +got):\n%s", diff)
	}
	if entries, _ := os.ReadDir(root); len(entries) != 1 {
		t.Errorf("beside the output: %v; want no temp dir or lock left", entries)
	}
	b, err := os.ReadFile(filepath.Join(out, MetricsName))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(string(b), "\n"); got != 6 {
		t.Errorf("%s has %d lines, want 5 shards + 1 total", MetricsName, got)
	}
	if !strings.Contains(string(b), `"phases":{"write":4.5}`) {
		t.Errorf("%s has no line with shard 4's phases {\"write\":4.5}:\n%s", MetricsName, b)
	}
}

// writeSeconds is the "write" phase testWork reports over shards 0..n-1.
func writeSeconds(n int) float64 {
	s := 0.0
	for i := range n {
		s += 0.5 + float64(i)
	}
	return s
}

func TestRunCacheHitAndMiss(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out")
	first := mustRun(t, testSpec(out), testWork(7, counter{}))
	digest := first.Manifest.Digest()

	var stdout bytes.Buffer
	calls := counter{}
	spec := testSpec(out)
	spec.Stdout = &stdout
	res := mustRun(t, spec, testWork(7, calls))
	if !res.Hit || len(calls) != 0 {
		t.Errorf("identical rerun: Hit %v, computed %v; want a hit with no work", res.Hit, calls.shards())
	}
	if !strings.Contains(stdout.String(), "cache hit") {
		t.Errorf("stdout = %q, want a cache hit line", stdout.String())
	}

	tests := []struct {
		name   string
		change func(*Spec)
	}{
		{"config", func(s *Spec) { s.Config = map[string]any{"rows": 11, "width": 3} }},
		{"seed", func(s *Spec) { s.Seed = 8 }},
		{"input", func(s *Spec) { s.Inputs[0].Digest = "sha256:ff" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := testSpec(out)
			spec.Inputs = append([]format.Input(nil), spec.Inputs...)
			tt.change(&spec)
			calls := counter{}
			res := mustRun(t, spec, testWork(spec.Seed, calls))
			if res.Hit || len(calls) != 5 {
				t.Errorf("Run after %s change: Hit %v, computed %v; want a miss recomputing all 5", tt.name, res.Hit, calls.shards())
			}
		})
	}
	// Back to the original spec: a miss again (the output was replaced), same digest.
	res = mustRun(t, testSpec(out), testWork(7, counter{}))
	if res.Hit || res.Manifest.Digest() != digest {
		t.Errorf("original spec again: Hit %v digest %s, want recomputed digest %s", res.Hit, res.Manifest.Digest(), digest)
	}
	spec = testSpec(out)
	spec.Force = true
	calls = counter{}
	if res := mustRun(t, spec, testWork(7, calls)); res.Hit || len(calls) != 5 {
		t.Errorf("Force over a hit: Hit %v, computed %v; want all 5 recomputed", res.Hit, calls.shards())
	}
}

func TestRunNeverTrustsDirWithoutValidManifest(t *testing.T) {
	tests := []struct {
		name   string
		damage func(t *testing.T, out string)
	}{
		{"no manifest", func(t *testing.T, out string) { os.Remove(filepath.Join(out, format.ManifestName)) }},
		{"truncated manifest", func(t *testing.T, out string) {
			os.WriteFile(filepath.Join(out, format.ManifestName), []byte(`{"kind":"refer`), 0o644)
		}},
		{"shard missing", func(t *testing.T, out string) { os.Remove(filepath.Join(out, "part-00002.parquet")) }},
		{"shard truncated", func(t *testing.T, out string) { os.Truncate(filepath.Join(out, "part-00003.parquet"), 1) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "out")
			want := mustRun(t, testSpec(out), testWork(7, counter{})).Manifest.Digest()
			tt.damage(t, out)
			var log bytes.Buffer
			spec := testSpec(out)
			spec.Log = slog.New(slog.NewTextHandler(&log, nil))
			calls := counter{}
			res := mustRun(t, spec, testWork(7, calls))
			if res.Hit || len(calls) != 5 || res.Manifest.Digest() != want {
				t.Errorf("Run over %s: Hit %v computed %v digest %s, want recomputed %s", tt.name, res.Hit, calls.shards(), res.Manifest.Digest(), want)
			}
			if tt.name != "no manifest" && !strings.Contains(log.String(), "cache miss") {
				t.Errorf("log lacks the miss reason:\n%s", log.String())
			}
		})
	}
}

// TestRunResumesAfterFailure: a run failed by something outside the stage (a reset
// connection, as a retriever that went away gives, or a failure the stage marks
// ErrTransient) keeps its temp dir, and the rerun computes only the shards without a
// valid record.
func TestRunResumesAfterFailure(t *testing.T) {
	for _, cause := range []error{&os.SyscallError{Syscall: "read", Err: syscall.ECONNRESET}, ErrTransient} {
		t.Run(cause.Error(), func(t *testing.T) { resumesAfter(t, cause) })
	}
}

func resumesAfter(t *testing.T, cause error) {
	clean := mustRun(t, testSpec(filepath.Join(t.TempDir(), "clean")), testWork(7, counter{}))

	out := filepath.Join(t.TempDir(), "out")
	calls := counter{}
	failing := func(ctx context.Context, w *Work) error {
		if w.Shard == 3 {
			return fmt.Errorf("retrieve: %w", cause)
		}
		return testWork(7, calls)(ctx, w)
	}
	if _, err := Run(context.Background(), testSpec(out), failing); !errors.Is(err, cause) || !strings.Contains(err.Error(), "shard 3") {
		t.Fatalf("Run = %v, want %v naming shard 3", err, cause)
	}
	if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("failed run published %s (stat err %v)", out, err)
	}
	// Damage a recorded shard in the temp dir: resume must recompute it, not trust it.
	tmp := out + ".tmp-" + clean.Key.Short()
	if err := os.WriteFile(filepath.Join(tmp, "part-00001.parquet"), []byte("garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	calls = counter{}
	res := mustRun(t, testSpec(out), testWork(7, calls))
	if diff := cmp.Diff([]int{1, 3, 4}, calls.shards()); diff != "" {
		t.Errorf("resumed run computed (-want +got):\n%s", diff)
	}
	if res.Resumed != 2 {
		t.Errorf("Resumed = %d, want 2", res.Resumed)
	}
	if diff := cmp.Diff(clean.Manifest.Outputs, res.Manifest.Outputs); diff != "" {
		t.Errorf("resumed outputs differ from a clean run (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(clean.Manifest.Timings.Phases, res.Manifest.Timings.Phases); diff != "" {
		t.Errorf("resumed phases differ from a clean run's, resumed shards' included (-want +got):\n%s", diff)
	}
}

func TestRunDiskFullPublishesNothing(t *testing.T) {
	enospc := &os.PathError{Op: "write", Path: "x", Err: syscall.ENOSPC}
	tests := []struct {
		name   string
		work   func(WorkFunc) WorkFunc
		writer func(string, []byte) error
	}{
		{"stage writer", func(fn WorkFunc) WorkFunc {
			return func(ctx context.Context, w *Work) error {
				if w.Shard == 2 {
					os.WriteFile(w.Path, []byte("half"), 0o644)
					return fmt.Errorf("write rows: %w", enospc)
				}
				return fn(ctx, w)
			}
		}, nil},
		{"completion record", func(fn WorkFunc) WorkFunc { return fn }, func(path string, b []byte) error {
			if strings.Contains(path, "part-00002") {
				return enospc
			}
			return renameio.WriteFile(path, b)
		}},
		{"manifest", func(fn WorkFunc) WorkFunc { return fn }, func(path string, b []byte) error {
			if filepath.Base(path) == format.ManifestName {
				return enospc
			}
			return renameio.WriteFile(path, b)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "out")
			spec := testSpec(out)
			spec.writeFile = tt.writer
			_, err := Run(context.Background(), spec, tt.work(testWork(7, counter{})))
			if !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), "disk full: nothing was published") {
				t.Fatalf("Run = %v, want ENOSPC saying nothing was published", err)
			}
			if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s exists after a disk-full failure", out)
			}
			if _, err := os.Stat(out + ".lock"); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("lock left behind after failure")
			}
			// With space again, the rerun finishes from the recorded shards.
			res := mustRun(t, testSpec(out), testWork(7, counter{}))
			if res.Resumed == 0 {
				t.Errorf("rerun resumed no shards")
			}
		})
	}
}

// TestDiskFull: the one hint every stage gives on a full disk, naming what the rerun
// continues from when something is kept; other errors pass unchanged.
func TestDiskFull(t *testing.T) {
	other := errors.New("boom")
	tests := []struct {
		err  error
		kept string
		want string
	}{
		{&os.PathError{Op: "write", Path: "x", Err: syscall.ENOSPC}, "out.tmp-k",
			"write x: no space left on device (disk full: nothing was published; free space and rerun, finished work is kept in out.tmp-k)"},
		{fmt.Errorf("save: %w", syscall.EDQUOT), "",
			"save: disk quota exceeded (disk full: nothing was published; free space and rerun)"},
		{other, "out.tmp-k", "boom"},
	}
	for _, tt := range tests {
		got := DiskFull(tt.err, tt.kept)
		if got.Error() != tt.want || !errors.Is(got, tt.err) {
			t.Errorf("DiskFull(%v, %q) = %q, want %q wrapping the error", tt.err, tt.kept, got, tt.want)
		}
	}
}

func TestRunVerify(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out")
	mustRun(t, testSpec(out), testWork(7, counter{}))
	spec := testSpec(out)
	spec.Verify = true
	calls := counter{}
	res := mustRun(t, spec, testWork(7, calls))
	if !res.Hit || !res.Verified || len(calls) != 5 {
		t.Errorf("Verify: Hit %v Verified %v computed %v, want a verified hit recomputing 5", res.Hit, res.Verified, calls.shards())
	}
	// A stage that is not deterministic fails verification, naming the shard.
	drift := func(ctx context.Context, w *Work) error {
		if w.Shard == 2 {
			return os.WriteFile(w.Path, []byte("different\n"), 0o644)
		}
		return testWork(7, counter{})(ctx, w)
	}
	_, err := Run(context.Background(), spec, drift)
	if !errors.Is(err, ErrVerify) || !strings.Contains(err.Error(), "part-00002.parquet") {
		t.Errorf("Verify of drifting stage = %v, want ErrVerify naming part-00002.parquet", err)
	}
	if _, err := os.Stat(out + ".verify-" + res.Key.Short()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("verify dir left behind")
	}
	if _, err := format.ReadManifest(out); err != nil {
		t.Errorf("failed verify damaged the output: %v", err)
	}
}

func TestRunLocked(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out")
	os.MkdirAll(filepath.Dir(out), 0o755)
	host, _ := os.Hostname()
	tests := []struct {
		name string
		info lockInfo
	}{
		{"live writer on this host", lockInfo{PID: 1, Host: host, Time: time.Now(), Start: procstat.StartTime(1), Boot: procstat.BootID()}},
		{"this very process", lockInfo{PID: os.Getpid(), Host: host, Time: time.Now(), Start: procstat.StartTime(os.Getpid()), Boot: procstat.BootID()}},
		{"writer on another host", lockInfo{PID: 1, Host: host + "-other", Time: time.Now()}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			release, err := lock(out+".lock", tt.info, func(lockInfo) bool { return true }, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			defer release()
			calls := counter{}
			spec := testSpec(out)
			spec.Host = host
			_, err = Run(context.Background(), spec, testWork(7, calls))
			if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), out+".lock") {
				t.Errorf("second writer: Run = %v, want ErrLocked naming the lock", err)
			}
			if len(calls) != 0 {
				t.Errorf("second writer computed shards %v", calls.shards())
			}
		})
	}
}

// TestRunTakesOverReusedPidLock: a lock whose pid now belongs to another process — a
// live pid started at another time than the lock says, this process's own pid (a
// restarted container's new process can get its killed writer's pid), or any pid of
// an earlier boot — is stale and taken over; nothing has to be removed by hand.
func TestRunTakesOverReusedPidLock(t *testing.T) {
	host, _ := os.Hostname()
	boot := procstat.BootID()
	tests := []struct {
		name string
		info lockInfo
	}{
		{"live pid, other start", lockInfo{PID: 1, Host: host, Time: time.Now(), Start: "1", Boot: boot}},
		{"own pid, other start", lockInfo{PID: os.Getpid(), Host: host, Time: time.Now(), Start: "1", Boot: boot}},
		{"own pid, old lock without start", lockInfo{PID: os.Getpid(), Host: host, Time: time.Now()}},
		{"earlier boot", lockInfo{PID: 1, Host: host, Time: time.Now(), Start: procstat.StartTime(1), Boot: "another-boot"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "out")
			if _, err := lock(out+".lock", tt.info, func(lockInfo) bool { return true }, slog.New(slog.DiscardHandler)); err != nil {
				t.Fatal(err)
			}
			var log bytes.Buffer
			spec := testSpec(out)
			spec.Host = host
			spec.Log = slog.New(slog.NewTextHandler(&log, nil))
			mustRun(t, spec, testWork(7, counter{}))
			if !strings.Contains(log.String(), "removed leftovers") {
				t.Errorf("log lacks the takeover warning:\n%s", log.String())
			}
		})
	}
}

func TestRunTakesOverStaleLock(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out")
	host, _ := os.Hostname()
	stale := lockInfo{PID: 4242, Host: host, Time: time.Now()}
	if _, err := lock(out+".lock", stale, func(lockInfo) bool { return true }, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	spec := testSpec(out)
	spec.Host = host
	spec.Log = slog.New(slog.NewTextHandler(&log, nil))
	spec.alive = func(pid int) bool { return pid != 4242 }
	mustRun(t, spec, testWork(7, counter{}))
	if !strings.Contains(log.String(), "removed leftovers") || !strings.Contains(log.String(), "out.lock (pid 4242, dead)") {
		t.Errorf("log lacks the takeover warning:\n%s", log.String())
	}
	if _, err := os.Stat(out + ".lock"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("lock not released after the run")
	}
}

func TestRunSummarize(t *testing.T) {
	dir := t.TempDir()
	spec := testSpec(filepath.Join(dir, "out"))
	var saw []format.Output
	spec.Summarize = func(tmp string, outs []format.Output) (map[string]float64, error) {
		saw = outs
		for _, o := range outs {
			if _, err := os.Stat(filepath.Join(tmp, o.File)); err != nil {
				return nil, err
			}
		}
		return map[string]float64{"adv_mean": 0.25}, nil
	}
	res, err := Run(context.Background(), spec, testWork(7, counter{}))
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Manifest.Metrics["adv_mean"]; got != 0.25 || len(saw) != spec.Shards {
		t.Errorf("manifest metric adv_mean = %v after summarizing %d shards, want 0.25 over %d", got, len(saw), spec.Shards)
	}
	m, err := format.ReadManifest(res.Dir)
	if err != nil || m.Metrics["adv_mean"] != 0.25 {
		t.Errorf("committed manifest adv_mean = %v (%v), want 0.25", m.Metrics["adv_mean"], err)
	}

	spec = testSpec(filepath.Join(dir, "clash"))
	spec.Summarize = func(string, []format.Output) (map[string]float64, error) {
		return map[string]float64{"rows": 1}, nil
	}
	if _, err := Run(context.Background(), spec, testWork(7, counter{})); !errors.Is(err, ErrSpec) {
		t.Errorf("Run with a summary metric named rows = %v, want ErrSpec", err)
	}
	if _, err := format.ReadManifest(filepath.Join(dir, "clash")); err == nil {
		t.Error("a failed summary published the output")
	}
}

// TestRunFailureLeavesNothing: a failure the stage finds itself (a bad input row in a
// shard, a summary it cannot compute at the commit) leaves nothing beside the output:
// a rerun of the same key would fail the same way, so the finished shards are only
// disk space (issue 45). The error names the input before the file being written.
func TestRunFailureLeavesNothing(t *testing.T) {
	errBad := errors.New("in/scores/part-00002.parquet: row 4: column \"reward\" is NaN")
	tests := []struct {
		name      string
		work      WorkFunc
		summarize func(string, []format.Output) (map[string]float64, error)
		prefix    string // what the error starts with
	}{
		{"shard", func(ctx context.Context, w *Work) error {
			if w.Shard == 2 {
				return errBad
			}
			return testWork(7, counter{})(ctx, w)
		}, nil, "stage test: shard 2: in/scores/part-00002.parquet: row 4"},
		{"commit", testWork(7, counter{}), func(string, []format.Output) (map[string]float64, error) {
			return nil, errBad
		}, "stage test: commit "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			out := filepath.Join(dir, "out")
			spec := testSpec(out)
			spec.Summarize = tt.summarize
			_, err := Run(context.Background(), spec, tt.work)
			if !errors.Is(err, errBad) {
				t.Fatalf("Run = %v, want %v", err, errBad)
			}
			if !strings.HasPrefix(err.Error(), tt.prefix) {
				t.Errorf("Run = %q, want it to start %q", err, tt.prefix)
			}
			if got := entries(t, dir); len(got) != 0 {
				t.Errorf("after the failed run: %v beside the output, want nothing", got)
			}
		})
	}
}

// TestRunInterruptedKeepsTemp: an interrupted run (SIGINT and SIGTERM cancel the
// context) keeps its temp dir as a killed one does: a rerun of the same key resumes
// from it; a run of another key removes it, says so in one log line and leaves nothing
// beside the output.
func TestRunInterruptedKeepsTemp(t *testing.T) {
	for _, same := range []bool{true, false} {
		t.Run(fmt.Sprintf("same key=%v", same), func(t *testing.T) {
			dir := t.TempDir()
			out := filepath.Join(dir, "out")
			ctx, cancel := context.WithCancel(context.Background())
			spec := testSpec(out)
			spec.Trace = func(step Step, shard int) {
				if step == StepRecorded && shard == 1 {
					cancel()
				}
			}
			if _, err := Run(ctx, spec, testWork(7, counter{})); !errors.Is(err, context.Canceled) {
				t.Fatalf("interrupted Run = %v, want context.Canceled", err)
			}
			if left := leftovers(out); len(left) != 1 || !strings.Contains(left[0], ".tmp-") {
				t.Fatalf("after the interrupted run, leftovers = %v, want its temp dir", left)
			}
			var log bytes.Buffer
			rerun := testSpec(out)
			rerun.Log = slog.New(slog.NewTextHandler(&log, nil))
			resumed, lines := 2, 0
			if !same {
				rerun.Seed, resumed, lines = 8, 0, 1
			}
			if res := mustRun(t, rerun, testWork(rerun.Seed, counter{})); res.Resumed != resumed {
				t.Errorf("rerun resumed %d shards, want %d", res.Resumed, resumed)
			}
			if got := entries(t, dir); !slices.Equal(got, []string{"out"}) {
				t.Errorf("beside the output after the rerun: %v, want only out", got)
			}
			if n := strings.Count(log.String(), "removed leftovers"); n != lines || n > 0 && !strings.Contains(log.String(), "out.tmp-") {
				t.Errorf("rerun's log has %d leftover lines, want %d naming the temp dir:\n%s", n, lines, log.String())
			}
		})
	}
}

// TestCacheHitRemovesLeftovers: a cache hit, which otherwise writes nothing, removes a
// dead writer's lock, a previous output moved aside and temp dirs of other keys; it
// leaves everything of a live writer alone.
func TestCacheHitRemovesLeftovers(t *testing.T) {
	for _, live := range []bool{false, true} {
		t.Run(fmt.Sprintf("live=%v", live), func(t *testing.T) {
			dir := t.TempDir()
			out := filepath.Join(dir, "out")
			spec := testSpec(out)
			mustRun(t, spec, testWork(7, counter{}))
			host, _ := os.Hostname()
			if _, err := lock(out+".lock", lockInfo{PID: 4242, Host: host, Time: time.Now()}, func(lockInfo) bool { return true }, slog.New(slog.DiscardHandler)); err != nil {
				t.Fatal(err)
			}
			// out.old-backup is a user's dataset, not a leftover: no key in its name.
			for _, d := range []string{out + ".old-0123456789ab", out + ".tmp-ba9876543210", filepath.Join(out, recordsDir), out + ".old-backup"} {
				if err := os.MkdirAll(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			before := listDir(t, dir)
			var log bytes.Buffer
			spec.Host = host
			spec.Log = slog.New(slog.NewTextHandler(&log, nil))
			spec.alive = func(pid int) bool { return live }
			if res := mustRun(t, spec, testWork(7, counter{})); !res.Hit {
				t.Fatal("rerun is not a cache hit")
			}
			got := listDir(t, dir)
			if live {
				// The live writer's lock, temp dir, aside dir and records all stay.
				if !slices.Equal(got, before) {
					t.Errorf("with a live writer: %v after the hit, want %v untouched", got, before)
				}
				return
			}
			if got, want := entries(t, dir), []string{"out", "out.old-backup"}; !slices.Equal(got, want) {
				t.Errorf("after the hit: %v beside the output, want %v", got, want)
			}
			if _, err := os.Stat(filepath.Join(out, recordsDir)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("completion records still inside the output: %v", err)
			}
			if n := strings.Count(log.String(), "removed leftovers"); n != 1 {
				t.Errorf("log has %d leftover lines, want 1:\n%s", n, log.String())
			}
		})
	}
}

// entries names what dir holds, not recursing.
func entries(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	return names
}
