package qwen2

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mempo/mempo/format"
	"github.com/mempo/mempo/jobs"
	"github.com/mempo/mempo/model/safetensors"
	"github.com/sugarme/gotch/ts"
)

// commitModel saves m with a tokenizer.json and commits the directory as the stage
// runtime commits a checkpoint (jobs.Begin and Artifact.Publish), returning its path.
func commitModel(t testing.TB, m *Model, maxShard int64) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "ckpt")
	a, hit, err := jobs.Begin(jobs.Spec{Out: out}, jobs.Key{7})
	if err != nil || hit != nil {
		t.Fatalf("Begin(%s) = %v, %v; want a fresh artifact", out, hit, err)
	}
	defer a.Release()
	if err := m.Save(a.Tmp, maxShard); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(a.Tmp, format.TokenizerFile), []byte(`{"model": {"vocab": {}}}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Publish(format.Commit{Stage: "init-model"}); err != nil {
		t.Fatal(err)
	}
	return out
}

// dataStart is the offset of the first tensor byte of a safetensors file.
func dataStart(t testing.TB, path string) int64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return 8 + int64(binary.LittleEndian.Uint64(b[:8]))
}

// edit rewrites the file at path in place through fn, keeping its size.
func edit(t testing.TB, path string, fn func(b []byte)) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	fn(b)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestLoadVerifiesCommit damages a committed checkpoint's files in place, keeping
// their sizes (what the commit record's size check passes), and wants every load
// refused with the file and both digests named; a directory without a record loads.
func TestLoadVerifiesCommit(t *testing.T) {
	m := newTestModel(t, testConfig(), Options{})
	tests := []struct {
		name     string
		maxShard int64
		file     string
		damage   func(t testing.TB, path string)
	}{
		{"low mantissa byte", 0, safetensors.SingleFile, func(t testing.TB, path string) {
			off := dataStart(t, path) + 1001*4 // byte 0 of a float32: the lowest mantissa bits
			edit(t, path, func(b []byte) { b[off] ^= 0x01 })
		}},
		{"exponent bit of every 50th weight", 0, safetensors.SingleFile, func(t testing.TB, path string) {
			start := dataStart(t, path)
			edit(t, path, func(b []byte) {
				for off := start; off+4 <= int64(len(b)); off += 50 * 4 {
					b[off+3] ^= 0x40 // the top exponent bit of a little-endian float32
				}
			})
		}},
		{"last byte of a shard", 40000, "", func(t testing.TB, path string) {
			edit(t, path, func(b []byte) { b[len(b)-1] ^= 0x80 })
		}},
		{"last byte of a shard loaded as bfloat16", 40000, "", func(t testing.TB, path string) {
			edit(t, path, func(b []byte) { b[len(b)-1] ^= 0x80 })
		}},
		{"low mantissa byte loaded as bfloat16", 0, safetensors.SingleFile, func(t testing.TB, path string) {
			off := dataStart(t, path) + 1001*4 // below bfloat16's precision: the weights load the same
			edit(t, path, func(b []byte) { b[off] ^= 0x01 })
		}},
		{"tokenizer", 0, format.TokenizerFile, func(t testing.TB, path string) {
			edit(t, path, func(b []byte) { copy(b[2:], "MODEL") })
		}},
		{"config", 0, ConfigFile, func(t testing.TB, path string) {
			edit(t, path, func(b []byte) {
				i := strings.Index(string(b), `"rms_norm_eps"`)
				b[i+1] = 'R'
			})
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := commitModel(t, m, tt.maxShard)
			if tt.file == "" {
				shards, _ := filepath.Glob(filepath.Join(dir, "model-*-of-*.safetensors"))
				if len(shards) < 2 {
					t.Fatalf("%s holds shards %q, want at least 2", dir, shards)
				}
				tt.file = filepath.Base(shards[len(shards)-1])
			}
			// Converted weights go through a host buffer the hash reads (readFile).
			var opt Options
			if strings.HasSuffix(tt.name, "as bfloat16") {
				opt.DType = "bfloat16"
			}
			if got, err := Load(dir, opt); err != nil {
				t.Fatalf("Load(%s) before damage = %v, want nil", dir, err)
			} else {
				got.Drop()
			}
			rec, err := format.ReadCommit(dir)
			if err != nil {
				t.Fatal(err)
			}
			want, ok := rec.File(tt.file)
			if !ok {
				t.Fatalf("record lists no %s: %+v", tt.file, rec.Files)
			}
			tt.damage(t, filepath.Join(dir, tt.file))
			got, err := Load(dir, opt)
			if err == nil {
				got.Drop()
				t.Fatalf("Load(%s) after damaging %s = nil error, want a digest mismatch", dir, tt.file)
			}
			sum, _, _ := format.Checksum(filepath.Join(dir, tt.file))
			msg := err.Error()
			if !errors.Is(err, format.ErrNotCheckpoint) || !strings.Contains(msg, tt.file) ||
				!strings.Contains(msg, want.SHA256) || !strings.Contains(msg, sum) || !strings.Contains(msg, "rerun") {
				t.Errorf("Load = %v, want ErrNotCheckpoint naming %s, sha256 %s (recorded) and %s (found), and a rerun", err, tt.file, want.SHA256, sum)
			}
		})
	}
	t.Run("no record", func(t *testing.T) {
		dir := commitModel(t, m, 0)
		if err := os.Remove(filepath.Join(dir, format.CommitFile)); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, safetensors.SingleFile)
		off := dataStart(t, path)
		edit(t, path, func(b []byte) { b[off] ^= 0x01 })
		got, err := Load(dir, Options{})
		if err != nil {
			t.Fatalf("Load(%s) without a record = %v, want nil: an HF hub directory has nothing to verify against", dir, err)
		}
		got.Drop()
	})
}

// BenchmarkLoadVerify loads a float32 model of 343 MB from the page cache with and
// without its commit record, and sha256s its weights file alone: the difference of
// the two loads is what verification costs. Load's doc comment records the figures.
func BenchmarkLoadVerify(b *testing.B) {
	c, err := Preset("tiny", 32000)
	if err != nil {
		b.Fatal(err)
	}
	c.HiddenSize, c.IntermediateSize, c.NumLayers, c.NumHeads, c.NumKVHeads = 1024, 2816, 4, 16, 2
	c.TieEmbedding = false
	m := newTestModel(b, c, Options{})
	dir := commitModel(b, m, 0)
	plain := b.TempDir()
	for _, f := range []string{ConfigFile, GenerationConfigFile, format.TokenizerFile, safetensors.SingleFile} {
		if err := os.Link(filepath.Join(dir, f), filepath.Join(plain, f)); err != nil {
			b.Fatal(err)
		}
	}
	fi, err := os.Stat(filepath.Join(dir, safetensors.SingleFile))
	if err != nil {
		b.Fatal(err)
	}
	for _, bb := range []struct {
		name string
		run  func() error
	}{
		{"sha256", func() error { _, _, err := format.Checksum(filepath.Join(dir, safetensors.SingleFile)); return err }},
		{"load/plain", func() error { return load(plain) }},
		{"load/verified", func() error { return load(dir) }},
	} {
		b.Run(bb.name, func(b *testing.B) {
			b.SetBytes(fi.Size())
			for b.Loop() {
				if err := bb.run(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func load(dir string) error {
	m, err := Load(dir, Options{})
	if err == nil {
		m.Drop()
	}
	return err
}

// TestLoadTruncated: a weights file cut short in its last tensor (its header's offsets
// now outrun it) fails the load with an error naming the file, with and without a
// commit record, converted or not, and leaves no tensor behind.
func TestLoadTruncated(t *testing.T) {
	m := newTestModel(t, testConfig(), Options{})
	for _, record := range []bool{true, false} {
		for _, dtype := range []string{"", "bfloat16"} {
			t.Run(fmt.Sprintf("record=%v/dtype=%s", record, cmpOr(dtype, "stored")), func(t *testing.T) {
				dir := commitModel(t, m, 0)
				if !record {
					if err := os.Remove(filepath.Join(dir, format.CommitFile)); err != nil {
						t.Fatal(err)
					}
				}
				path := filepath.Join(dir, safetensors.SingleFile)
				fi, err := os.Stat(path)
				if err != nil {
					t.Fatal(err)
				}
				if err := os.Truncate(path, fi.Size()-6); err != nil {
					t.Fatal(err)
				}
				live := len(ts.ExistingTensors)
				got, err := Load(dir, Options{DType: dtype})
				if err == nil {
					got.Drop()
					t.Fatalf("Load of a truncated %s = nil error", path)
				}
				if !strings.Contains(err.Error(), safetensors.SingleFile) {
					t.Errorf("Load = %v, want an error naming %s", err, safetensors.SingleFile)
				}
				if n := len(ts.ExistingTensors); n != live {
					t.Errorf("%d tensors alive after the failed load, %d before", n, live)
				}
			})
		}
	}
}
