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
func publish(t *testing.T, out string, key Key, files map[string]string) *Commit {
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

// TestCommitDigest: a record's digest ignores where its inputs were read from and
// follows everything else.
func TestCommitDigest(t *testing.T) {
	c := &Commit{Format: commitFormat, Version: commitVersion, Stage: "update", CacheKey: strings.Repeat("a", 64),
		Inputs: []format.Input{{Name: "rollouts", Path: "/runs/a/rollouts", Digest: "dataset:1"}},
		Files:  []FileDigest{{File: "model.safetensors", SHA256: strings.Repeat("b", 64), Bytes: 7}}}
	moved := *c
	moved.Inputs = []format.Input{{Name: "rollouts", Path: "../a/rollouts", Digest: "dataset:1"}}
	if c.Digest() != moved.Digest() {
		t.Errorf("digest changed with the input path alone")
	}
	if c.Inputs[0].Path != "/runs/a/rollouts" {
		t.Errorf("Digest changed the record's input path to %q", c.Inputs[0].Path)
	}
	other := *c
	other.Inputs = []format.Input{{Name: "rollouts", Path: "/runs/a/rollouts", Digest: "dataset:2"}}
	weights := *c
	weights.Files = []FileDigest{{File: "model.safetensors", SHA256: strings.Repeat("c", 64), Bytes: 7}}
	for name, d := range map[string]*Commit{"input digest": &other, "file digest": &weights} {
		if d.Digest() == c.Digest() {
			t.Errorf("digest did not change with the %s", name)
		}
	}
}

// TestCheckpointInput checks that a committed checkpoint is keyed by its commit
// record's digest (whatever its path), that a foreign HF directory is keyed by its bytes,
// and that anything else is refused with ErrNotCheckpoint naming the directory.
func TestCheckpointInput(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "policy")
	publish(t, out, Key{5}, map[string]string{"config.json": "{}\n", "model.safetensors": "weights"})
	c, err := ReadCommit(out)
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

// TestVerifyCheckpoint damages a committed checkpoint's files keeping their sizes (what
// the cache-hit check passes) and wants Verify to name the file and both digests; a
// directory without a record has nothing to verify against. A file in a subdirectory
// (a trainer's optimizer state) is recorded and named by its slash-separated path.
func TestVerifyCheckpoint(t *testing.T) {
	files := map[string]string{"config.json": "{}\n", "model.safetensors": strings.Repeat("w", 1000), TokenizerFile: `{"v": 1}` + "\n",
		"trainer/optimizer.safetensors": strings.Repeat("o", 100)}
	tests := []struct {
		name  string
		file  string
		names []string
	}{
		{"weights", "model.safetensors", nil},
		{"tokenizer", TokenizerFile, []string{"config.json", TokenizerFile}},
		{"config", "config.json", []string{"config.json"}},
		{"subdirectory", "trainer/optimizer.safetensors", []string{"trainer/optimizer.safetensors"}},
		{"subdirectory, all files", "trainer/optimizer.safetensors", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "ckpt")
			c := publish(t, out, Key{4}, files)
			if err := VerifyCheckpoint(out, tt.names...); err != nil {
				t.Fatalf("VerifyCheckpoint(%s) = %v before damage, want nil", out, err)
			}
			if c.Tokenizer() == "" {
				t.Errorf("Tokenizer() = \"\", want the recorded sha256 of %s", TokenizerFile)
			}
			if _, ok := c.File(tt.file); !ok {
				t.Fatalf("record lists %+v, want %s among them", c.Files, tt.file)
			}
			path := filepath.Join(out, filepath.FromSlash(tt.file))
			b, _ := os.ReadFile(path)
			b[len(b)/2] ^= 1
			if err := os.WriteFile(path, b, 0o644); err != nil {
				t.Fatal(err)
			}
			if _, err := CheckpointInput("policy", out); err != nil {
				t.Fatalf("CheckpointInput = %v, want the size-only check to pass (the case Verify exists for)", err)
			}
			want, _ := c.File(tt.file)
			sum := sha256.Sum256(b)
			err := VerifyCheckpoint(out, tt.names...)
			if !errors.Is(err, ErrNotCheckpoint) || !strings.Contains(err.Error(), path) ||
				!strings.Contains(err.Error(), want.SHA256) || !strings.Contains(err.Error(), hex.EncodeToString(sum[:])) {
				t.Errorf("VerifyCheckpoint = %v, want ErrNotCheckpoint naming %s and both digests", err, path)
			}
			if err := os.Remove(filepath.Join(out, CommitFile)); err != nil {
				t.Fatal(err)
			}
			if err := VerifyCheckpoint(out, tt.names...); err != nil {
				t.Errorf("VerifyCheckpoint without a record = %v, want nil", err)
			}
		})
	}
	t.Run("unrecorded tokenizer", func(t *testing.T) {
		out := filepath.Join(t.TempDir(), "ckpt")
		publish(t, out, Key{5}, map[string]string{"config.json": "{}\n"})
		if err := os.WriteFile(filepath.Join(out, TokenizerFile), []byte("{}"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := VerifyCheckpoint(out, "config.json", TokenizerFile); !errors.Is(err, ErrNotCheckpoint) || !strings.Contains(err.Error(), "not listed") {
			t.Errorf("VerifyCheckpoint with a tokenizer added after the commit = %v, want ErrNotCheckpoint, not listed", err)
		}
	})
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
