package jobs

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// publish commits files (name → body) as the checkpoint of key at out.
func publish(t *testing.T, out string, key Key, files map[string]string) *Commit {
	t.Helper()
	a, hit, err := Begin(Spec{Out: out}, key)
	if err != nil || hit != nil {
		t.Fatalf("Begin(%s) = %v, %v; want a fresh artifact", out, hit, err)
	}
	defer a.Release()
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(a.Tmp, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	published, err := a.Publish(Commit{Stage: "test", Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	c, err := ReadCommit(out)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(c, published) {
		t.Errorf("ReadCommit = %+v, Publish returned %+v; want the record written", c, published)
	}
	return c
}

// TestArtifact publishes a checkpoint and checks the commit record is the cache hit,
// that a foreign or unfinished directory is not, and that the lock keeps a second
// writer out with the runtime's one ErrLocked.
func TestArtifact(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "ckpt")
	key := Key{1, 2, 3}
	a, hit, err := Begin(Spec{Out: out}, key)
	if err != nil || hit != nil {
		t.Fatalf("Begin = %v, %v; want a fresh artifact", hit, err)
	}
	if _, _, err := Begin(Spec{Out: out}, key); !errors.Is(err, ErrLocked) {
		t.Errorf("second Begin while locked = %v, want ErrLocked", err)
	}
	if err := os.WriteFile(filepath.Join(a.Tmp, "config.json"), []byte("{}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(a.Tmp, MetricsName), []byte("{\"seconds\": 1}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadCommit(a.Tmp); !errors.Is(err, ErrNotCheckpoint) {
		t.Errorf("ReadCommit of an unfinished dir = %v, want ErrNotCheckpoint", err)
	}
	if _, err := a.Publish(Commit{Stage: "test", Seed: 1}); err != nil {
		t.Fatal(err)
	}
	a.Release()
	if _, err := os.Stat(out + ".lock"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("lock left after Release: %v", err)
	}
	c, err := ReadCommit(out)
	if err != nil || c.CacheKey != key.String() || c.CodeVersion != CodeVersion() || len(c.Files) != 1 || c.Files[0].File != "config.json" {
		t.Fatalf("ReadCommit = %+v, %v; want the key, the code version and config.json only", c, err)
	}
	if _, hit, err := Begin(Spec{Out: out}, key); err != nil || hit == nil {
		t.Errorf("Begin after publish = %v, %v; want a cache hit", hit, err)
	}
	other, hit, err := Begin(Spec{Out: out}, Key{9})
	if err != nil || hit != nil {
		t.Fatalf("Begin with another key = %v, %v; want a miss", hit, err)
	}
	other.Release()
	if err := os.WriteFile(filepath.Join(out, "config.json"), []byte("{\"x\": 1}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	b, hit, err := Begin(Spec{Out: out}, key)
	if err != nil || hit != nil {
		t.Fatalf("Begin after a file changed size = %v, %v; want a miss", hit, err)
	}
	b.Release()
}

// TestBeginTakesOverStaleLock checks that checkpoints share the datasets' lock: the
// lock file is the runtime's (pid, host, time), and a dead writer's lock is taken over
// with the runtime's warning.
func TestBeginTakesOverStaleLock(t *testing.T) {
	out := filepath.Join(t.TempDir(), "ckpt")
	host, _ := os.Hostname()
	stale := lockInfo{PID: 4242, Host: host, Time: time.Now()}
	if _, err := lock(out+".lock", stale, func(int) bool { return false }, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	spec := Spec{Out: out, Host: host, Log: slog.New(slog.NewTextHandler(&log, nil))}
	spec.alive = func(pid int) bool { return pid != 4242 }
	a, hit, err := Begin(spec, Key{4})
	if err != nil || hit != nil {
		t.Fatalf("Begin over a stale lock = %v, %v; want a fresh artifact", hit, err)
	}
	held, _, err := readLock(out + ".lock")
	if err != nil || held.PID != os.Getpid() || held.Host != host || held.Time.IsZero() {
		t.Errorf("lock while building = %+v, %v; want this process's pid, host and time", held, err)
	}
	if !strings.Contains(log.String(), "took over stale lock") || !strings.Contains(log.String(), "dead_pid=4242") {
		t.Errorf("log lacks the takeover warning:\n%s", log.String())
	}
	a.Release()

	spec.alive = func(int) bool { return true }
	if _, err := lock(out+".lock", stale, spec.alive, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Begin(spec, Key{4}); !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), out+".lock") {
		t.Errorf("Begin under a live writer's lock = %v, want ErrLocked naming the lock", err)
	}
}

// TestCheckpointInput checks that a committed checkpoint is keyed by the sha256 of its
// commit record (whatever its path), that a foreign HF directory is keyed by its bytes,
// and that anything else is refused with ErrNotCheckpoint naming the directory.
func TestCheckpointInput(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "policy")
	publish(t, out, Key{5}, map[string]string{"config.json": "{}\n", "model.safetensors": "weights"})
	raw, err := os.ReadFile(filepath.Join(out, CommitFile))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(raw)
	want := "checkpoint:" + hex.EncodeToString(sum[:])
	in, err := CheckpointInput("policy", out)
	if err != nil || in.Digest != want || in.Name != "policy" || in.Path != out {
		t.Fatalf("CheckpointInput = %+v, %v; want digest %s", in, err, want)
	}
	if got := DigestOf(in); got != hex.EncodeToString(sum[:]) {
		t.Errorf("DigestOf(%s) = %s, want the bare sha256", in.Digest, got)
	}
	moved := filepath.Join(dir, "moved")
	if err := os.Rename(out, moved); err != nil {
		t.Fatal(err)
	}
	if in, err := CheckpointInput("policy", moved); err != nil || in.Digest != want {
		t.Errorf("CheckpointInput after a move = %+v, %v; want the same digest %s", in, err, want)
	}

	foreignDir := filepath.Join(dir, "hf")
	os.MkdirAll(foreignDir, 0o755)
	os.WriteFile(filepath.Join(foreignDir, "config.json"), []byte("{}\n"), 0o644)
	sumDir, err := dirDigest(foreignDir)
	if err != nil {
		t.Fatal(err)
	}
	if in, err := CheckpointInput("policy", foreignDir); err != nil || in.Digest != "dir:"+sumDir {
		t.Errorf("CheckpointInput of an HF directory = %+v, %v; want dir:%s", in, err, sumDir)
	}

	plain := filepath.Join(dir, "plain")
	os.MkdirAll(plain, 0o755)
	os.WriteFile(filepath.Join(plain, "part-00000.parquet"), []byte("rows"), 0o644)
	damaged := filepath.Join(dir, "damaged")
	publish(t, damaged, Key{6}, map[string]string{"config.json": "{}\n"})
	os.WriteFile(filepath.Join(damaged, CommitFile), []byte(`{"format": "mempo.checkpoint"`), 0o644)
	resized := filepath.Join(dir, "resized")
	publish(t, resized, Key{7}, map[string]string{"config.json": "{}\n"})
	os.WriteFile(filepath.Join(resized, "config.json"), []byte("{\"x\": 1}\n"), 0o644)
	for _, tt := range []struct{ name, dir string }{
		{"no record and no config.json", plain},
		{"damaged record", damaged},
		{"file resized since the record", resized},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := CheckpointInput("policy", tt.dir)
			if !errors.Is(err, ErrNotCheckpoint) || !strings.Contains(err.Error(), tt.dir) {
				t.Errorf("CheckpointInput(%s) = %v, want ErrNotCheckpoint naming the directory", tt.dir, err)
			}
		})
	}
	if _, err := CheckpointInput("policy", filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("CheckpointInput of a missing directory = %v, want ErrNotExist", err)
	}
}

// TestSnapshot saves two snapshots through a caller's write function and checks only
// the newest stays, it loads with its cursor, a damaged one is ignored, and Publish
// leaves none in the checkpoint.
func TestSnapshot(t *testing.T) {
	out := filepath.Join(t.TempDir(), "ckpt")
	a, _, err := Begin(Spec{Out: out}, Key{8})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Release()
	type cursor struct{ Done int }
	var c cursor
	if _, ok := a.LoadSnapshot(&c); ok {
		t.Fatal("LoadSnapshot of a fresh artifact = ok, want none")
	}
	for step := 1; step <= 2; step++ {
		write := func(dir string) error {
			return os.WriteFile(filepath.Join(dir, "weights"), []byte{byte(step)}, 0o644)
		}
		if err := a.SaveSnapshot(step, write, cursor{Done: step}); err != nil {
			t.Fatal(err)
		}
	}
	s, ok := a.LoadSnapshot(&c)
	if !ok || s.Step != 2 || c.Done != 2 {
		t.Fatalf("LoadSnapshot = %+v, %v, cursor %+v; want step 2", s, ok, c)
	}
	if b, err := os.ReadFile(filepath.Join(s.Dir, "weights")); err != nil || !bytes.Equal(b, []byte{2}) {
		t.Errorf("snapshot weights = %v, %v; want what write wrote at step 2", b, err)
	}
	if entries, _ := os.ReadDir(filepath.Dir(s.Dir)); len(entries) != 2 { // step-2 and latest.json
		t.Errorf("snapshot dir holds %d entries, want the newest snapshot and latest.json", len(entries))
	}
	failing := func(string) error { return errors.New("disk on fire") }
	if err := a.SaveSnapshot(3, failing, cursor{Done: 3}); err == nil || !strings.Contains(err.Error(), "disk on fire") {
		t.Errorf("SaveSnapshot with a failing write = %v, want its error", err)
	}
	if s, ok := a.LoadSnapshot(&c); !ok || s.Step != 2 {
		t.Errorf("after a failed snapshot LoadSnapshot = %+v, %v; want step 2 still", s, ok)
	}
	os.WriteFile(filepath.Join(s.Dir, cursorFile), []byte("{torn"), 0o644)
	if _, ok := a.LoadSnapshot(&c); ok {
		t.Error("LoadSnapshot of a damaged cursor = ok, want a fresh start")
	}
	os.WriteFile(filepath.Join(a.Tmp, "config.json"), []byte("{}\n"), 0o644)
	if _, err := a.Publish(Commit{Stage: "test"}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(out, resumeDir)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("published checkpoint holds %s (%v), want the snapshots removed", resumeDir, err)
	}
}
