package jobstest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/mempo/mempo/format"
	"github.com/mempo/mempo/jobs"
)

var killCkpt = CheckpointConfig{Steps: 4, Data: "good"}

// cleanCheckpoint is the commit record and file list of an uninterrupted run of cfg.
func cleanCheckpoint(t *testing.T, cfg CheckpointConfig) (*format.Commit, []string) {
	t.Helper()
	out := filepath.Join(t.TempDir(), "clean")
	res, err := RunCheckpoint(context.Background(), cfg, jobs.Spec{Out: out, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	return res.Commit, tree(t, out)
}

// tree names every file and directory under dir, relative to it.
func tree(t *testing.T, dir string) []string {
	t.Helper()
	var names []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && path != dir {
			rel, _ := filepath.Rel(dir, path)
			names = append(names, filepath.ToSlash(rel))
		}
		return err
	})
	if err != nil {
		t.Fatalf("walk %s: %v", dir, err)
	}
	return names
}

// checkCheckpoint fails t unless out is the checkpoint an uninterrupted run writes
// (same commit record, same files, no snapshots inside) and stands alone in its
// directory: no lock, no temp dir, no previous checkpoint moved aside.
func checkCheckpoint(t *testing.T, out string, want *format.Commit, wantTree []string) {
	t.Helper()
	got, err := format.ReadCommit(out)
	if err != nil {
		t.Fatalf("after the rerun: %v", err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("commit record differs from an uninterrupted run's (-want +got):\n%s", diff)
	}
	if err := got.Verify(out); err != nil {
		t.Errorf("Verify(%s) = %v, want nil", out, err)
	}
	if diff := cmp.Diff(wantTree, tree(t, out)); diff != "" {
		t.Errorf("files inside %s differ from an uninterrupted run's (-want +got):\n%s", out, diff)
	}
	if got := entriesOf(t, filepath.Dir(out)); !slices.Equal(got, []string{filepath.Base(out)}) {
		t.Errorf("beside the checkpoint: %v, want only %s", got, filepath.Base(out))
	}
}

func entriesOf(t *testing.T, dir string) []string {
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

// TestCheckpointKillAndResume kills a checkpoint run with SIGKILL at each step of its
// training and final publish, with and without an older checkpoint (another key) in
// place, and reruns it. A reader sees the old checkpoint, none or the new one, never a
// torn one; the rerun resumes from the newest snapshot or is a cache hit, ends with an
// uninterrupted run's checkpoint, removes the dead writer's lock, the old checkpoint
// moved aside and any temp dir, and says so in one line of stderr; a third run is a
// quiet cache hit.
func TestCheckpointKillAndResume(t *testing.T) {
	want, wantTree := cleanCheckpoint(t, killCkpt)
	old := CheckpointConfig{Steps: 2, Data: "old"}
	tests := []struct {
		kill    string
		old     bool   // an older checkpoint is at out before the run
		seen    string // what out holds after the kill: "none", "old" or "new"
		hit     bool   // the rerun is a cache hit
		resumed int    // steps the rerun takes from the killed run
	}{
		{"recorded:2", false, "none", false, 2},
		{"recorded:4", true, "old", false, 4},
		{"manifest:-1", false, "none", false, 0}, // the snapshots are gone: recomputed
		{"manifest:-1", true, "old", false, 0},
		{"aside:-1", true, "none", false, 0},
		{"renamed:-1", false, "new", true, 0},
		{"renamed:-1", true, "new", true, 0},
		{"published:-1", false, "new", true, 0},
		{"published:-1", true, "new", true, 0},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s/old=%v", tt.kill, tt.old), func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "ckpt")
			var oldKey string
			if tt.old {
				res, err := RunCheckpoint(context.Background(), old, jobs.Spec{Out: out, Seed: 1})
				if err != nil {
					t.Fatal(err)
				}
				oldKey = res.Commit.CacheKey
			}
			killed, _, stderr := runChild(t, childArgs{Out: out, Seed: 1, Kill: tt.kill, Checkpoint: &killCkpt})
			if !killed {
				t.Fatalf("child was not killed at %s\nstderr:\n%s", tt.kill, stderr)
			}
			seen := "none"
			if c, err := format.ReadCommit(out); err == nil {
				switch c.CacheKey {
				case oldKey:
					seen = "old"
				case want.CacheKey:
					seen = "new"
				default:
					seen = c.CacheKey
				}
			}
			if seen != tt.seen {
				t.Fatalf("after the kill at %s, %s holds the %s checkpoint, want %s", tt.kill, out, seen, tt.seen)
			}
			if _, err := os.Stat(out + ".lock"); err != nil {
				t.Errorf("killed child left no lock to take over: %v", err)
			}

			_, stdout, stderr := runChild(t, childArgs{Out: out, Seed: 1, Checkpoint: &killCkpt})
			if tt.hit {
				if !strings.Contains(stdout, "cache hit") {
					t.Errorf("rerun after kill at %s: %q, want a cache hit", tt.kill, stdout)
				}
			} else if line := fmt.Sprintf("%d resumed", tt.resumed); !strings.Contains(stdout, line) {
				t.Errorf("rerun after kill at %s: %q, want %q", tt.kill, stdout, line)
			}
			checkCheckpoint(t, out, want, wantTree)
			if n := strings.Count(stderr, "removed leftovers"); n != 1 || !strings.Contains(stderr, "ckpt.lock (pid") {
				t.Errorf("rerun stderr has %d lines about leftovers, want 1 naming the dead writer's lock:\n%s", n, stderr)
			}
			if tt.old && (tt.kill == "aside:-1" || tt.kill == "renamed:-1") {
				if aside := "ckpt.old-" + want.CacheKey[:12]; !strings.Contains(stderr, aside) {
					t.Errorf("rerun stderr does not name %s:\n%s", aside, stderr)
				}
			}
			if _, stdout, stderr := runChild(t, childArgs{Out: out, Seed: 1, Checkpoint: &killCkpt}); !strings.Contains(stdout, "cache hit") || stderr != "" {
				t.Errorf("third run: %q, stderr %q; want a quiet cache hit", stdout, stderr)
			}
		})
	}
}

// TestCheckpointFailThenGood: a checkpoint run that fails keeps its temp dir with its
// snapshots and releases the lock. The next run of the same output ends with the
// checkpoint an uninterrupted run writes and nothing beside it: a run of the same key
// resumes from the temp dir and publishes it, a run of another key (the data fixed)
// removes it and says so in one log line.
func TestCheckpointFailThenGood(t *testing.T) {
	tests := []struct {
		name    string
		bad     CheckpointConfig
		resumed int
		logged  bool // the good run reports the failed run's temp dir as removed
	}{
		{"same key", CheckpointConfig{Steps: 4, Data: "good", FailAt: 3}, 2, false},
		{"another key", CheckpointConfig{Steps: 4, Data: "bad", FailAt: 3}, 0, true},
	}
	want, wantTree := cleanCheckpoint(t, killCkpt)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "ckpt")
			if _, err := RunCheckpoint(context.Background(), tt.bad, jobs.Spec{Out: out, Seed: 1}); !errors.Is(err, ErrStep) {
				t.Fatalf("RunCheckpoint(FailAt 3) = %v, want ErrStep", err)
			}
			left := entriesOf(t, filepath.Dir(out))
			if len(left) != 1 || !strings.HasPrefix(left[0], "ckpt.tmp-") {
				t.Fatalf("after the failed run: %v beside the output, want its temp dir only (no lock)", left)
			}
			var log bytes.Buffer
			spec := jobs.Spec{Out: out, Seed: 1, Log: slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelWarn}))}
			res, err := RunCheckpoint(context.Background(), killCkpt, spec)
			if err != nil {
				t.Fatal(err)
			}
			if res.Resumed != tt.resumed {
				t.Errorf("good run resumed %d steps, want %d", res.Resumed, tt.resumed)
			}
			checkCheckpoint(t, out, want, wantTree)
			n := strings.Count(log.String(), "removed leftovers")
			if got := n == 1 && strings.Contains(log.String(), left[0]); got != tt.logged || (!tt.logged && n != 0) {
				t.Errorf("good run's log (%d leftover lines):\n%s\nwant the removal of %s reported: %v", n, log.String(), left[0], tt.logged)
			}
		})
	}
}
