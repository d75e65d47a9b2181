package main

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mempo/mempo/model/qwen2"
	"github.com/mempo/mempo/stages/rollout"
)

// TestWarnBFloat16: an evaluation that decoded a policy in bfloat16 on the CPU (its
// checkpoint's precision, or --dtype) warns once for that policy; float32, a float32
// --dtype over a bfloat16 checkpoint, or a GPU does not.
func TestWarnBFloat16(t *testing.T) {
	dir := t.TempDir()
	ckpt := func(name, dtype string) string {
		d := filepath.Join(dir, name)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		c, err := qwen2.Preset("tiny", 64)
		if err != nil {
			t.Fatal(err)
		}
		c.TorchDType = dtype
		b, err := c.Encode()
		if err == nil {
			err = os.WriteFile(filepath.Join(d, qwen2.ConfigFile), b, 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	bf16, fp32 := ckpt("bf16", "bfloat16"), ckpt("fp32", "float32")
	for _, c := range []struct {
		name, dir, device, dtype string
		warns                    int
	}{
		{"bfloat16 checkpoint", bf16, "cpu", "", 1},
		{"--dtype bfloat16", fp32, "cpu", "bfloat16", 1},
		{"float32 checkpoint", fp32, "cpu", "", 0},
		{"--dtype float32", bf16, "cpu", "float32", 0},
		{"on a GPU", bf16, "cuda", "", 0},
	} {
		var log bytes.Buffer
		e := evalCmd{roll: rollout.Config{Device: c.device, DType: c.dtype}}
		for range 3 { // one policy, three test sets
			e.warnBFloat16("mempo", c.dir, slog.New(slog.NewTextHandler(&log, nil)))
		}
		if got := strings.Count(log.String(), "decoded in bfloat16 on the CPU"); got != c.warns {
			t.Errorf("%s: %d warnings, want %d:\n%s", c.name, got, c.warns, log.String())
		}
	}
}
