package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mempo/mempo/agent/search"
	"github.com/mempo/mempo/agent/task"
	"github.com/mempo/mempo/audit"
	"github.com/mempo/mempo/format"
	"github.com/mempo/mempo/jobs"
	"github.com/mempo/mempo/stages/gentask"
	"github.com/mempo/mempo/stages/index"
)

// flipByte flips the low bit of the byte at off (from the end when negative), keeping
// the file's size.
func flipByte(t *testing.T, path string, off int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if off < 0 {
		off += len(b)
	}
	b[off] ^= 1
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestVerifyDirs runs mempo verify's check on each kind of committed directory, as
// the stages commit them, then damaged: a byte of a committed file, a manifest claim,
// an unrecorded file.
func TestVerifyDirs(t *testing.T) {
	dir := t.TempDir()
	taskDir := filepath.Join(dir, "task")
	tc := task.Config{Seed: 3, People: 24, Cities: 8, Companies: 8, Countries: 3, TwinRate: 0.3, TwoHopRate: 0.3,
		TrainK: 2, Train: 24, TestK: []int{2}, Test: 4}
	if _, err := gentask.Run(context.Background(), tc, jobs.Spec{Out: taskDir}); err != nil {
		t.Fatal(err)
	}
	indexDir := filepath.Join(dir, "index")
	if _, err := index.Run(context.Background(), index.Config{Corpus: filepath.Join(taskDir, task.CorpusFile)}, jobs.Spec{Out: indexDir}); err != nil {
		t.Fatal(err)
	}
	// A trained checkpoint keeps its optimizer state in a subdirectory; one written
	// before that (legacy) at the top level.
	commit := func(out, stage string, files map[string]string) {
		a, _, err := jobs.Begin(jobs.Spec{Out: out}, jobs.Key{9})
		if err != nil {
			t.Fatal(err)
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
		if _, err := a.Publish(format.Commit{Stage: stage}); err != nil {
			t.Fatal(err)
		}
	}
	ckpt, trained, legacy := filepath.Join(dir, "ckpt"), filepath.Join(dir, "trained"), filepath.Join(dir, "legacy")
	commit(ckpt, "init-model", map[string]string{"config.json": "{}\n", "model.safetensors": strings.Repeat("w", 4096), format.TokenizerFile: "{}\n"})
	commit(trained, "update", map[string]string{"config.json": "{}\n", "model.safetensors": strings.Repeat("w", 4096), "trainer/optimizer.safetensors": strings.Repeat("o", 512)})
	commit(legacy, "update", map[string]string{"config.json": "{}\n", "model.safetensors": strings.Repeat("w", 4096), "optimizer.safetensors": strings.Repeat("o", 512)})
	train := filepath.Join(taskDir, task.TrainDir)

	for _, tt := range []struct{ dir, want string }{
		{train, "prompts"}, {ckpt, "checkpoint of stage init-model"}, {taskDir, "task"}, {indexDir, "index of"},
		{trained, "checkpoint of stage update, 3 files"}, {legacy, "checkpoint of stage update, 3 files"},
	} {
		if got, err := audit.Verify(tt.dir); err != nil || !strings.Contains(got, tt.want) {
			t.Errorf("audit.Verify(%s) = %q, %v, want a summary with %q", tt.dir, got, err, tt.want)
		}
	}
	if _, err := audit.Verify(dir); err == nil {
		t.Errorf("audit.Verify(%s) of a directory without a commit record = nil error, want one", dir)
	}

	t.Run("checkpoint weights", func(t *testing.T) {
		rec, err := format.ReadCommit(ckpt)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := rec.File("model.safetensors")
		path := filepath.Join(ckpt, "model.safetensors")
		flipByte(t, path, 100)
		defer flipByte(t, path, 100)
		sum, _, _ := format.Checksum(path)
		_, err = audit.Verify(ckpt)
		if !errors.Is(err, format.ErrNotCheckpoint) || !strings.Contains(err.Error(), want.SHA256) || !strings.Contains(err.Error(), sum) {
			t.Errorf("audit.Verify(%s) = %v, want ErrNotCheckpoint with sha256 %s and %s", ckpt, err, want.SHA256, sum)
		}
	})
	t.Run("checkpoint optimizer state", func(t *testing.T) {
		path := filepath.Join(trained, "trainer", "optimizer.safetensors")
		flipByte(t, path, 10)
		defer flipByte(t, path, 10)
		if _, err := audit.Verify(trained); !errors.Is(err, format.ErrNotCheckpoint) || !strings.Contains(err.Error(), path) {
			t.Errorf("audit.Verify(%s) = %v, want ErrNotCheckpoint naming %s", trained, err, path)
		}
	})
	t.Run("checkpoint extra file", func(t *testing.T) {
		extra := filepath.Join(ckpt, "added.bin")
		if err := os.WriteFile(extra, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		defer os.Remove(extra)
		if _, err := audit.Verify(ckpt); err == nil || !strings.Contains(err.Error(), "added.bin") {
			t.Errorf("audit.Verify(%s) = %v, want the unrecorded added.bin named", ckpt, err)
		}
	})
	t.Run("index files", func(t *testing.T) {
		rec, err := format.ReadCommit(indexDir)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := audit.Verify(indexDir); err != nil || !strings.Contains(got, fmt.Sprintf("%d files", len(rec.Files))) ||
			!strings.Contains(got, "corpus unchanged") {
			t.Errorf("audit.Verify(%s) = %q, %v, want its %d files and the corpus unchanged", indexDir, got, err, len(rec.Files))
		}
		for _, f := range rec.Files {
			path := filepath.Join(indexDir, filepath.FromSlash(f.File))
			flipByte(t, path, -1)
			if _, err := audit.Verify(indexDir); !errors.Is(err, format.ErrNotCheckpoint) || !strings.Contains(err.Error(), path) {
				t.Errorf("audit.Verify(%s) with %s changed = %v, want ErrNotCheckpoint naming it", indexDir, f.File, err)
			}
			flipByte(t, path, -1)
		}
	})
	t.Run("index without record", func(t *testing.T) {
		record := filepath.Join(indexDir, format.CommitFile)
		if err := os.Rename(record, record+"~"); err != nil {
			t.Fatal(err)
		}
		defer os.Rename(record+"~", record)
		if _, err := audit.Verify(indexDir); !errors.Is(err, search.ErrNotIndex) || !strings.Contains(err.Error(), "mempo index --corpus FILE") {
			t.Errorf("audit.Verify(%s) without %s = %v, want ErrNotIndex saying how to build one", indexDir, format.CommitFile, err)
		}
	})
	t.Run("task corpus", func(t *testing.T) {
		path := filepath.Join(taskDir, task.CorpusFile)
		flipByte(t, path, 10)
		defer flipByte(t, path, 10)
		if _, err := audit.Verify(taskDir); !errors.Is(err, format.ErrCorrupt) || !strings.Contains(err.Error(), task.CorpusFile) {
			t.Errorf("audit.Verify(%s) = %v, want ErrCorrupt naming %s", taskDir, err, task.CorpusFile)
		}
	})
	t.Run("manifest rows", func(t *testing.T) {
		m, err := format.ReadManifest(train)
		if err != nil {
			t.Fatal(err)
		}
		orig := *m
		orig.Outputs = append([]format.Output(nil), m.Outputs...)
		m.Outputs[0].Rows += 5
		if err := format.WriteManifest(train, m); err != nil {
			t.Fatal(err)
		}
		defer format.WriteManifest(train, &orig)
		if _, err := audit.Verify(train); !errors.Is(err, format.ErrCorrupt) || !strings.Contains(err.Error(), "rows") {
			t.Errorf("audit.Verify(%s) = %v, want ErrCorrupt about rows", train, err)
		}
		if _, err := audit.Verify(taskDir); err == nil {
			t.Errorf("audit.Verify(%s) with an edited train manifest = nil error, want one", taskDir)
		}
	})
}
