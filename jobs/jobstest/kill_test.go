package jobstest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/mempo/mempo/format"
	"github.com/mempo/mempo/jobs"
)

// The kill tests run the stage in a child process (this test binary, re-executed) and
// SIGKILL it from inside at an exact step, so no timing decides where it dies.
const childEnv = "REFERENCE_TEST_CHILD"

var killCfg = Config{Rows: 40, Shards: 4, Width: 8, Batch: 4}

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(child())
	}
	os.Exit(m.Run())
}

// childArgs is what the parent asks the child to do.
type childArgs struct {
	Out   string
	Seed  int64
	Part  jobs.Part
	Merge int
	Kill  string // "step" or "step:shard" or "step:shard:n" (the n-th time, from 1)
	// Checkpoint, when set, runs the probe checkpoint stage instead of the probe.
	Checkpoint *CheckpointConfig
}

func child() int {
	var a childArgs
	if err := json.Unmarshal([]byte(os.Getenv(childEnv)), &a); err != nil {
		fmt.Fprintln(os.Stderr, "child args:", err)
		return 3
	}
	spec := jobs.Spec{Out: a.Out, Seed: a.Seed, Part: a.Part, Merge: a.Merge, Stdout: os.Stdout,
		Log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	if a.Kill != "" {
		parts := strings.Split(a.Kill, ":")
		shard, nth := -1, 1
		if len(parts) > 1 {
			shard, _ = strconv.Atoi(parts[1])
		}
		if len(parts) > 2 {
			nth, _ = strconv.Atoi(parts[2])
		}
		seen := 0
		spec.Trace = func(step jobs.Step, g int) {
			if string(step) == parts[0] && g == shard {
				if seen++; seen == nth {
					syscall.Kill(os.Getpid(), syscall.SIGKILL)
				}
			}
		}
	}
	var err error
	if a.Checkpoint != nil {
		_, err = RunCheckpoint(context.Background(), *a.Checkpoint, spec)
	} else {
		_, err = Run(context.Background(), killCfg, spec)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// runChild runs the stage in a child and reports whether SIGKILL ended it, and what it
// printed: the one-line result on stdout, warnings on stderr.
func runChild(t *testing.T, a childArgs) (killed bool, stdout, stderr string) {
	t.Helper()
	b, _ := json.Marshal(a)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+string(b))
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
			return true, out.String(), errb.String()
		}
	}
	if err != nil {
		t.Fatalf("child %+v: %v\nstderr:\n%s", a, err, errb.String())
	}
	return false, out.String(), errb.String()
}

// checkNoLeftovers fails t unless out stands alone in its directory, with no
// completion records inside, and the rerun that tidied up said so in one line of
// stderr.
func checkNoLeftovers(t *testing.T, out, rerunStderr string) {
	t.Helper()
	entries, _ := os.ReadDir(filepath.Dir(out))
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if len(names) != 1 || names[0] != filepath.Base(out) {
		t.Errorf("left beside the output: %v, want only %s", names, filepath.Base(out))
	}
	if _, err := os.Stat(filepath.Join(out, "_records")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("completion records left inside %s (stat: %v)", out, err)
	}
	if n := strings.Count(rerunStderr, "removed leftovers"); n != 1 {
		t.Errorf("rerun stderr has %d lines about leftovers, want 1:\n%s", n, rerunStderr)
	}
}

func cleanOutputs(t *testing.T) []format.Output {
	t.Helper()
	out := filepath.Join(t.TempDir(), "clean")
	res, err := Run(context.Background(), killCfg, jobs.Spec{Out: out, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	return res.Manifest.Outputs
}

func TestKillAndResume(t *testing.T) {
	want := cleanOutputs(t)
	tests := []struct {
		kill      string
		published bool // the kill comes after the rename: the output is complete
		resumed   int  // shards the rerun takes from the killed run
	}{
		{"rows:0:1", false, 0},     // first batch of the first shard
		{"rows:2:2", false, 2},     // mid-shard: two batches of shard 2 in the file
		{"written:1", false, 1},    // shard 1 written, not yet recorded
		{"recorded:1", false, 2},   // right after shard 1's record
		{"recorded:3", false, 4},   // every shard recorded
		{"commit:-1", false, 4},    // verified, before metrics and manifest
		{"manifest:-1", false, 4},  // manifest in the temp dir, before the rename
		{"renamed:-1", true, -1},   // renamed; parent dir not yet synced
		{"published:-1", true, -1}, // renamed; records not yet cleaned up
	}
	for _, tt := range tests {
		t.Run(tt.kill, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "out")
			killed, _, _ := runChild(t, childArgs{Out: out, Seed: 1, Kill: tt.kill})
			if !killed {
				t.Fatalf("child was not killed at %s", tt.kill)
			}
			_, err := format.ReadManifest(out)
			if got := err == nil; got != tt.published {
				t.Fatalf("after kill at %s: %s is a dataset = %v (err %v), want %v", tt.kill, out, got, err, tt.published)
			}
			if _, err := os.Stat(out + ".lock"); err != nil {
				t.Errorf("killed child left no lock to take over: %v", err)
			}
			_, stdout, stderr := runChild(t, childArgs{Out: out, Seed: 1})
			if tt.published {
				if !strings.Contains(stdout, "cache hit") {
					t.Errorf("rerun after kill at %s: %q, want a cache hit", tt.kill, stdout)
				}
			} else if wantLine := fmt.Sprintf("%d resumed", tt.resumed); !strings.Contains(stdout, wantLine) {
				t.Errorf("rerun after kill at %s: %q, want %q", tt.kill, stdout, wantLine)
			}
			m, err := format.ReadManifest(out)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, m.Outputs); diff != "" {
				t.Errorf("outputs after kill at %s and rerun differ from a clean run (-want +got):\n%s", tt.kill, diff)
			}
			if got := readPrompts(t, out); len(got) != killCfg.Rows {
				t.Errorf("after kill at %s and rerun: %d prompts read back, want %d", tt.kill, len(got), killCfg.Rows)
			}
			checkNoLeftovers(t, out, stderr)
			if _, stdout, stderr := runChild(t, childArgs{Out: out, Seed: 1}); !strings.Contains(stdout, "cache hit") || stderr != "" {
				t.Errorf("third run: %q, stderr %q; want a quiet cache hit", stdout, stderr)
			}
		})
	}
}

// TestKillReplacingOldOutput: an older output (seed 2) is in place and the seed-1 run
// dies in its final publish — before the rename, with the old output moved aside, or
// after the rename with the old one not yet removed. A reader sees the old dataset, no
// dataset, or the new one, never a torn one; the rerun ends with the seed-1 dataset
// alone, its lock and the moved-aside output removed.
func TestKillReplacingOldOutput(t *testing.T) {
	tests := []struct {
		kill     string
		seedSeen int64 // seed of the dataset at out after the kill; 0: none
	}{
		{"manifest:-1", 2},
		{"aside:-1", 0},
		{"renamed:-1", 1},
		{"published:-1", 1},
	}
	want := cleanOutputs(t)
	for _, tt := range tests {
		t.Run(tt.kill, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "out")
			if _, err := Run(context.Background(), killCfg, jobs.Spec{Out: out, Seed: 2}); err != nil {
				t.Fatal(err)
			}
			if killed, _, _ := runChild(t, childArgs{Out: out, Seed: 1, Kill: tt.kill}); !killed {
				t.Fatal("child was not killed")
			}
			m, err := format.ReadManifest(out)
			switch {
			case tt.seedSeen == 0 && err == nil:
				t.Fatalf("after the kill: %s is a dataset of seed %d, want none", out, m.Seed)
			case tt.seedSeen != 0 && (err != nil || m.Seed != tt.seedSeen):
				t.Fatalf("after the kill: %v err %v, want the seed-%d dataset intact", m, err, tt.seedSeen)
			}
			_, _, stderr := runChild(t, childArgs{Out: out, Seed: 1})
			m, err = format.ReadManifest(out)
			if err != nil || m.Seed != 1 {
				t.Fatalf("after rerun: %v err %v, want the seed-1 dataset", m, err)
			}
			if diff := cmp.Diff(want, m.Outputs); diff != "" {
				t.Errorf("outputs (-want +got):\n%s", diff)
			}
			checkNoLeftovers(t, out, stderr)
		})
	}
}

func TestKilledPartThenMerge(t *testing.T) {
	want := cleanOutputs(t)
	out := filepath.Join(t.TempDir(), "out")
	if killed, _, _ := runChild(t, childArgs{Out: out, Seed: 1, Part: jobs.Part{Index: 1, Count: 2}, Kill: "rows:3:2"}); !killed {
		t.Fatal("part 1/2 was not killed")
	}
	runChild(t, childArgs{Out: out, Seed: 1, Part: jobs.Part{Index: 0, Count: 2}})
	runChild(t, childArgs{Out: out, Seed: 1, Part: jobs.Part{Index: 1, Count: 2}})
	if killed, _, _ := runChild(t, childArgs{Out: out, Seed: 1, Merge: 2, Kill: "commit:-1"}); !killed {
		t.Fatal("merge was not killed")
	}
	if _, err := format.ReadManifest(out); err == nil {
		t.Fatalf("a killed merge left %s looking complete", out)
	}
	runChild(t, childArgs{Out: out, Seed: 1, Merge: 2})
	m, err := format.ReadManifest(out)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, m.Outputs); diff != "" {
		t.Errorf("merged outputs differ from an unsharded run (-want +got):\n%s", diff)
	}
}
