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
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mempo/mempo/format"
)

// publish commits files (name → body) as the checkpoint of key at out.
func publish(t *testing.T, out string, key Key, files map[string]string) *format.Commit {
	t.Helper()
	a, hit, err := Begin(Spec{Out: out}, key)
	if err != nil || hit != nil {
		t.Fatalf("Begin(%s) = %v, %v; want a fresh artifact", out, hit, err)
	}
	defer a.Release()
	for name, body := range files {
		path := filepath.Join(a.Tmp, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	published, err := a.Publish(format.Commit{Stage: "test", Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	c, err := format.ReadCommit(out)
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
	if _, err := format.ReadCommit(a.Tmp); !errors.Is(err, format.ErrNotCheckpoint) {
		t.Errorf("ReadCommit of an unfinished dir = %v, want ErrNotCheckpoint", err)
	}
	if _, err := a.Publish(format.Commit{Stage: "test", Seed: 1}); err != nil {
		t.Fatal(err)
	}
	a.Release()
	if _, err := os.Stat(out + ".lock"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("lock left after Release: %v", err)
	}
	c, err := format.ReadCommit(out)
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
// and reported with the rest of its leftovers, as a dataset run reports it.
func TestBeginTakesOverStaleLock(t *testing.T) {
	out := filepath.Join(t.TempDir(), "ckpt")
	host, _ := os.Hostname()
	stale := lockInfo{PID: 4242, Host: host, Time: time.Now()}
	if _, err := lock(out+".lock", stale, func(lockInfo) bool { return false }, slog.New(slog.DiscardHandler)); err != nil {
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
	if !strings.Contains(log.String(), "removed leftovers") || !strings.Contains(log.String(), "ckpt.lock (pid 4242, dead)") {
		t.Errorf("log lacks the takeover warning:\n%s", log.String())
	}
	a.Release()

	spec.alive = func(int) bool { return true }
	if _, err := lock(out+".lock", stale, func(lockInfo) bool { return true }, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Begin(spec, Key{4}); !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), out+".lock") {
		t.Errorf("Begin under a live writer's lock = %v, want ErrLocked naming the lock", err)
	}
}

// TestCheckpointInput checks that a committed checkpoint is keyed by its commit
// record's digest (whatever its path), that a foreign HF directory is keyed by its bytes,
// and that anything else is refused with ErrNotCheckpoint naming the directory.
func TestCheckpointInput(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "policy")
	publish(t, out, Key{5}, map[string]string{"config.json": "{}\n", "model.safetensors": "weights"})
	c, err := format.ReadCommit(out)
	if err != nil {
		t.Fatal(err)
	}
	want := "checkpoint:" + c.Digest()
	in, err := CheckpointInput("policy", out)
	if err != nil || in.Digest != want || in.Name != "policy" || in.Path != out {
		t.Fatalf("CheckpointInput = %+v, %v; want digest %s", in, err, want)
	}
	if got := DigestOf(in); got != c.Digest() {
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
	os.WriteFile(filepath.Join(damaged, format.CommitFile), []byte(`{"format": "mempo.checkpoint"`), 0o644)
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
			if !errors.Is(err, format.ErrNotCheckpoint) || !strings.Contains(err.Error(), tt.dir) {
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
	if _, err := a.Publish(format.Commit{Stage: "test"}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(out, resumeDir)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("published checkpoint holds %s (%v), want the snapshots removed", resumeDir, err)
	}
}

// TestPublishedRecordVerifies: the record Publish writes is one format verifies, with
// a file in a subdirectory (a trainer's optimizer state) named by its slash-separated
// path; a file damaged keeping its size passes the size-only check of a cache hit and
// CheckpointInput (the case format.VerifyCheckpoint exists for) and fails Verify.
func TestPublishedRecordVerifies(t *testing.T) {
	out := filepath.Join(t.TempDir(), "ckpt")
	c := publish(t, out, Key{4}, map[string]string{"config.json": "{}\n", "model.safetensors": strings.Repeat("w", 1000),
		format.TokenizerFile: `{"v": 1}` + "\n", "trainer/optimizer.safetensors": strings.Repeat("o", 100)})
	if c.Format != format.CommitFormat || c.Version != format.CommitVersion || c.Tokenizer() == "" {
		t.Errorf("record %+v, want format %s version %d and the tokenizer's sha256", c, format.CommitFormat, format.CommitVersion)
	}
	if err := format.VerifyCheckpoint(out); err != nil {
		t.Fatalf("VerifyCheckpoint(%s) = %v before damage, want nil", out, err)
	}
	const name = "trainer/optimizer.safetensors"
	want, ok := c.File(name)
	if !ok {
		t.Fatalf("record lists %+v, want %s among them", c.Files, name)
	}
	path := filepath.Join(out, filepath.FromSlash(name))
	b, _ := os.ReadFile(path)
	b[len(b)/2] ^= 1
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := CheckpointInput("policy", out); err != nil {
		t.Fatalf("CheckpointInput = %v, want the size-only check to pass", err)
	}
	if hit := cachedCheckpoint(out, Key{4}, slog.New(slog.DiscardHandler)); hit == nil {
		t.Errorf("cachedCheckpoint after a same-size change = miss, want the size-only check to pass")
	}
	sum := sha256.Sum256(b)
	err := format.VerifyCheckpoint(out, name)
	if !errors.Is(err, format.ErrNotCheckpoint) || !strings.Contains(err.Error(), path) ||
		!strings.Contains(err.Error(), want.SHA256) || !strings.Contains(err.Error(), hex.EncodeToString(sum[:])) {
		t.Errorf("VerifyCheckpoint = %v, want ErrNotCheckpoint naming %s and both digests", err, path)
	}
}

// TestBeginRemovesLeftovers: Begin, on a cache hit and on a miss alike, removes what
// dead writers left beside a checkpoint (their lock, a previous checkpoint moved aside,
// temp dirs of other keys) and reports it in one log line; a miss keeps its own key's
// temp dir with the snapshot it resumes from. A live writer's files are left alone, and
// a user's directory that merely starts with the checkpoint's name is never touched.
func TestBeginRemovesLeftovers(t *testing.T) {
	key := Key{4}
	tests := []struct {
		name string
		hit  bool
		live bool
		want []string // beside the checkpoint afterwards
	}{
		{"hit", true, false, []string{"ckpt", "ckpt.old-backup"}},
		{"hit, live writer", true, true, nil},
		{"miss", false, false, []string{"ckpt", "ckpt.lock", "ckpt.old-backup", "ckpt.tmp-" + key.Short()}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			out := filepath.Join(dir, "ckpt")
			publishedKey := key
			if !tt.hit {
				publishedKey = Key{5}
			}
			publish(t, out, publishedKey, map[string]string{"config.json": "{}\n"})
			host, _ := os.Hostname()
			if _, err := lock(out+".lock", lockInfo{PID: 4242, Host: host, Time: time.Now()}, func(lockInfo) bool { return true }, slog.New(slog.DiscardHandler)); err != nil {
				t.Fatal(err)
			}
			own := filepath.Join(out+".tmp-"+key.Short(), resumeDir, "step-2")
			for _, d := range []string{out + ".old-0123456789ab", out + ".tmp-ba9876543210", out + ".verify-0123456789ab", out + ".old-backup", own} {
				if err := os.MkdirAll(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			before := listDir(t, dir)
			var log bytes.Buffer
			spec := Spec{Out: out, Host: host, Log: slog.New(slog.NewTextHandler(&log, nil))}
			spec.alive = func(int) bool { return tt.live }
			a, hit, err := Begin(spec, key)
			if err != nil {
				t.Fatal(err)
			}
			if got := hit != nil; got != tt.hit {
				t.Fatalf("Begin: hit %v, want %v", got, tt.hit)
			}
			if a != nil {
				defer a.Release()
				if _, err := os.Stat(own); err != nil {
					t.Errorf("the snapshot of this key's temp dir is gone: %v", err)
				}
			}
			if tt.live {
				if got := listDir(t, dir); !slices.Equal(got, before) {
					t.Errorf("with a live writer: %v after Begin, want %v untouched", got, before)
				}
				return
			}
			if got := entries(t, dir); !slices.Equal(got, tt.want) {
				t.Errorf("after Begin: %v beside the checkpoint, want %v", got, tt.want)
			}
			if n := strings.Count(log.String(), "removed leftovers"); n != 1 || !strings.Contains(log.String(), "ckpt.lock (pid 4242, dead)") {
				t.Errorf("log has %d leftover lines, want 1 naming the dead writer's lock:\n%s", n, log.String())
			}
		})
	}
}
