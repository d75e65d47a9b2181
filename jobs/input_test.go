package jobs

import (
	"os"
	"path/filepath"
	"testing"
)

func TestDirDigest(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) {
		t.Helper()
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("config.json", "{}")
	write("model.safetensors", "weights")
	base, err := dirDigest(dir)
	if err != nil {
		t.Fatal(err)
	}
	write(".lock", "pid 1")
	write(MetricsName, `{"timing_s": 3.2}`)
	write(legacyMetricsName, `{"timing_s": 3.1}`) // a run from before the rename
	write(".tmp/x", "scratch")
	if got, err := dirDigest(dir); err != nil || got != base {
		t.Errorf("dirDigest after adding dot files and a metrics record = %s, %v; want unchanged %s", got, err, base)
	}
	write("model.safetensors", "weights2")
	if got, _ := dirDigest(dir); got == base {
		t.Error("dirDigest did not change when a file's bytes changed")
	}
	write("model.safetensors", "weights")
	write("sub/tokenizer.json", "{}")
	if got, _ := dirDigest(dir); got == base {
		t.Error("dirDigest did not change when a file was added")
	}
	if _, err := dirDigest(t.TempDir()); err == nil {
		t.Error("dirDigest of an empty dir = nil error, want error")
	}
}
