package format

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// commitDir writes files (name → body) into a new directory with a commit record
// listing them, as jobs' Publish writes it, and returns the directory and the record.
func commitDir(t *testing.T, files map[string]string) (string, *Commit) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "ckpt")
	c := Commit{Format: CommitFormat, Version: CommitVersion, Stage: "test", CacheKey: strings.Repeat("4", 64), Seed: 1}
	for name, body := range files {
		path := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256([]byte(body))
		c.Files = append(c.Files, FileDigest{File: name, SHA256: hex.EncodeToString(sum[:]), Bytes: int64(len(body))})
	}
	sort.Slice(c.Files, func(i, j int) bool { return c.Files[i].File < c.Files[j].File })
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, CommitFile), append(b, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir, &c
}

// TestReadCommit reads a record back as written and refuses a missing, damaged or
// foreign one with ErrNotCheckpoint naming the path; OpenCommit alone lets a directory
// without any record through.
func TestReadCommit(t *testing.T) {
	dir, want := commitDir(t, map[string]string{"config.json": "{}\n"})
	c, err := ReadCommit(dir)
	if err != nil || c.Digest() != want.Digest() || len(c.Files) != 1 {
		t.Fatalf("ReadCommit = %+v, %v; want the record written", c, err)
	}
	for _, tt := range []struct{ name, record string }{
		{"no record", ""},
		{"torn record", `{"format": "mempo.checkpoint"`},
		{"other format", `{"format": "other", "version": 1, "cache_key": "` + strings.Repeat("a", 64) + `"}`},
		{"bad file name", `{"format": "mempo.checkpoint", "version": 1, "cache_key": "` + strings.Repeat("a", 64) +
			`", "files": [{"file": "../x", "sha256": "` + strings.Repeat("b", 64) + `", "bytes": 1}]}`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if tt.record != "" {
				if err := os.WriteFile(filepath.Join(dir, CommitFile), []byte(tt.record), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := ReadCommit(dir); !errors.Is(err, ErrNotCheckpoint) || !strings.Contains(err.Error(), dir) {
				t.Errorf("ReadCommit = %v, want ErrNotCheckpoint naming %s", err, dir)
			}
			c, err := OpenCommit(dir)
			if tt.record == "" && (c != nil || err != nil) {
				t.Errorf("OpenCommit without a record = %+v, %v; want nil, nil", c, err)
			}
			if tt.record != "" && !errors.Is(err, ErrNotCheckpoint) {
				t.Errorf("OpenCommit of a bad record = %v, want ErrNotCheckpoint", err)
			}
		})
	}
}

// TestCommitDigest: a record's digest ignores where its inputs were read from and
// follows everything else.
func TestCommitDigest(t *testing.T) {
	c := &Commit{Format: CommitFormat, Version: CommitVersion, Stage: "update", CacheKey: strings.Repeat("a", 64),
		Inputs: []Input{{Name: "rollouts", Path: "/runs/a/rollouts", Digest: "dataset:1"}},
		Files:  []FileDigest{{File: "model.safetensors", SHA256: strings.Repeat("b", 64), Bytes: 7}}}
	moved := *c
	moved.Inputs = []Input{{Name: "rollouts", Path: "../a/rollouts", Digest: "dataset:1"}}
	if c.Digest() != moved.Digest() {
		t.Errorf("digest changed with the input path alone")
	}
	if c.Inputs[0].Path != "/runs/a/rollouts" {
		t.Errorf("Digest changed the record's input path to %q", c.Inputs[0].Path)
	}
	other := *c
	other.Inputs = []Input{{Name: "rollouts", Path: "/runs/a/rollouts", Digest: "dataset:2"}}
	weights := *c
	weights.Files = []FileDigest{{File: "model.safetensors", SHA256: strings.Repeat("c", 64), Bytes: 7}}
	for name, d := range map[string]*Commit{"input digest": &other, "file digest": &weights} {
		if d.Digest() == c.Digest() {
			t.Errorf("digest did not change with the %s", name)
		}
	}
}

// TestVerifyCheckpoint damages a committed checkpoint's files keeping their sizes and
// wants Verify to name the file and both digests; a directory without a record has
// nothing to verify against. A file in a subdirectory (a trainer's optimizer state) is
// recorded and named by its slash-separated path.
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
			out, c := commitDir(t, files)
			if err := VerifyCheckpoint(out, tt.names...); err != nil {
				t.Fatalf("VerifyCheckpoint(%s) = %v before damage, want nil", out, err)
			}
			if c.Tokenizer() == "" {
				t.Errorf("Tokenizer() = \"\", want the recorded sha256 of %s", TokenizerFile)
			}
			want, ok := c.File(tt.file)
			if !ok {
				t.Fatalf("record lists %+v, want %s among them", c.Files, tt.file)
			}
			path := filepath.Join(out, filepath.FromSlash(tt.file))
			b, _ := os.ReadFile(path)
			b[len(b)/2] ^= 1
			if err := os.WriteFile(path, b, 0o644); err != nil {
				t.Fatal(err)
			}
			sum := sha256.Sum256(b)
			err := VerifyCheckpoint(out, tt.names...)
			if !errors.Is(err, ErrNotCheckpoint) || !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), path) ||
				!strings.Contains(err.Error(), want.SHA256) || !strings.Contains(err.Error(), hex.EncodeToString(sum[:])) {
				t.Errorf("VerifyCheckpoint = %v, want ErrNotCheckpoint and ErrCorrupt naming %s and both digests", err, path)
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
		out, _ := commitDir(t, map[string]string{"config.json": "{}\n"})
		if err := os.WriteFile(filepath.Join(out, TokenizerFile), []byte("{}"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := VerifyCheckpoint(out, "config.json", TokenizerFile); !errors.Is(err, ErrNotCheckpoint) || !strings.Contains(err.Error(), "not listed") {
			t.Errorf("VerifyCheckpoint with a tokenizer added after the commit = %v, want ErrNotCheckpoint, not listed", err)
		}
	})
	t.Run("recorded file missing", func(t *testing.T) {
		out, _ := commitDir(t, map[string]string{"config.json": "{}\n", TokenizerFile: "{}\n"})
		path := filepath.Join(out, TokenizerFile)
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
		if err := VerifyCheckpoint(out); !errors.Is(err, ErrNotCheckpoint) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "missing") {
			t.Errorf("VerifyCheckpoint with a recorded file removed = %v, want ErrNotCheckpoint naming %s, missing", err, path)
		}
	})
}
