package train

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/mempo/mempo/format"
	"github.com/mempo/mempo/jobs"
	"github.com/mempo/mempo/model/bpe"
	"github.com/mempo/mempo/model/qwen2"
)

// TestSnapshotDue checks WithSnapshotEvery's one meaning: a snapshot after every n-th
// step and after the last step of each epoch; n <= 0 at epoch ends only.
func TestSnapshotDue(t *testing.T) {
	epoch := []int{0, 0, 0, 1, 1, 1, 1, 2} // epochs of 3, 4 and 1 steps
	tests := []struct {
		every int
		want  []int // steps done when a snapshot follows
	}{
		{1, []int{1, 2, 3, 4, 5, 6, 7, 8}},
		{2, []int{2, 3, 4, 6, 7, 8}},
		{3, []int{3, 6, 7, 8}},
		{0, []int{3, 7, 8}},
		{-1, []int{3, 7, 8}},
		{100, []int{3, 7, 8}},
	}
	for _, tt := range tests {
		var got []int
		for k := range epoch {
			if snapshotDue(epoch, k, tt.every) {
				got = append(got, k+1)
			}
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("WithSnapshotEvery(%d): snapshots after steps %v, want %v", tt.every, got, tt.want)
		}
	}
}

// lineageMetric is the metric of lineageLoop's step.
type lineageMetric struct {
	Loss float64 `json:"loss"`
}

func (lineageMetric) Size() (seqs, tokens int) { return 1, 2 }

// lineageLoop is a Loop of one NLL step on a fixed pair that continues from's lineage
// into out.
func lineageLoop(from, out string) Loop[lineageMetric] {
	pair := []qwen2.Pair{{Context: []int64{3, 14, 15}, Response: []int64{9, 2}}}
	adam := DefaultAdamW
	adam.LR = 1e-2
	return Loop[lineageMetric]{
		Stage: "lineage", Unit: "step", Units: "steps", Config: map[string]string{"test": "lineage"},
		From: from, AdamW: adam, Continue: true, Spec: jobs.Spec{Out: out, Seed: 1},
		Prepare: func(context.Context) (Plan, error) { return Plan{Epochs: 1, Epoch: []int{0}}, nil },
		Step: func(k int, m *qwen2.Model, o *AdamW) (lineageMetric, error) {
			loss, _, err := NLLStep{Model: m}.Backward(pair)
			if err == nil {
				_, err = o.Step()
			}
			if err == nil {
				err = o.ZeroGrad()
			}
			return lineageMetric{Loss: loss}, err
		},
		Finish: func(*qwen2.Model, map[string]float64, []lineageMetric) (map[string]float64, error) {
			return map[string]float64{}, nil
		},
	}
}

// lineageStart writes a model with init-model's tokenizer set (eos <|im_end|>, pad and
// bos <|endoftext|>) into a new directory, without a commit record or a pad_token_id in
// config.json, as a checkpoint from elsewhere or from before. With bare, the set is
// tokenizer.json alone; then, when tokenizerConfig is not "", it gets that
// tokenizer_config.json.
func lineageStart(t *testing.T, bare bool, tokenizerConfig string) (dir string, pad int) {
	t.Helper()
	tok, err := bpe.Train(slices.Values([]string{"who founded acme", "the seine"}), bpe.TrainConfig{VocabSize: 300})
	if err != nil {
		t.Fatal(err)
	}
	eos, _ := tok.Special(bpe.ImEnd)
	bos, _ := tok.Special(bpe.EndOfText)
	c, err := qwen2.Preset("tiny", tok.VocabSize())
	if err != nil {
		t.Fatal(err)
	}
	c.HiddenSize, c.IntermediateSize, c.NumLayers, c.NumHeads, c.NumKVHeads, c.MaxPositions = 16, 32, 1, 2, 1, 64
	e, b := int(eos), int(bos)
	c.EOSTokenID, c.BOSTokenID = &e, &b
	m, err := qwen2.New(c, qwen2.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Drop()
	dir = filepath.Join(t.TempDir(), "start")
	if err := m.Init(5); err != nil {
		t.Fatal(err)
	}
	// The weights go first, so config.json has no pad_token_id, as in checkpoints
	// written before it was named there.
	if err := m.Save(dir, 0); err != nil {
		t.Fatal(err)
	}
	if bare {
		err = tok.Save(filepath.Join(dir, format.TokenizerFile))
	} else {
		err = tok.SaveHF(dir, bpe.DefaultHFConfig(c.MaxPositions))
	}
	if err == nil && tokenizerConfig != "" {
		err = os.WriteFile(filepath.Join(dir, bpe.ConfigFile), []byte(tokenizerConfig), 0o644)
	}
	if err != nil {
		t.Fatal(err)
	}
	if c, err := qwen2.ReadConfig(filepath.Join(dir, qwen2.ConfigFile)); err != nil || c.PadTokenID != nil {
		t.Fatalf("start config.json: pad_token_id %v, %v; want none", c.PadTokenID, err)
	}
	return dir, b
}

// legacyLayout copies the checkpoint src to dst as checkpoints were written before the
// optimizer state moved into TrainerDir: LegacyOptimizerFile at the top level, so
// recorded in checkpoint.json.
func legacyLayout(t *testing.T, src, dst string) {
	t.Helper()
	if err := os.CopyFS(dst, os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dst, OptimizerFile), filepath.Join(dst, LegacyOptimizerFile)); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dst, TrainerDir)); err != nil {
		t.Fatal(err)
	}
	c, err := format.ReadCommit(dst)
	if err != nil {
		t.Fatal(err)
	}
	for i := range c.Files {
		if c.Files[i].File == OptimizerFile {
			c.Files[i].File = LegacyOptimizerFile
		}
	}
	slices.SortFunc(c.Files, func(a, b format.FileDigest) int { return strings.Compare(a.File, b.File) })
	if err := jobs.WriteJSON(filepath.Join(dst, format.CommitFile), c); err != nil {
		t.Fatal(err)
	}
}

// TestLoopCheckpointLayout: a trained checkpoint holds its optimizer state in
// TrainerDir, so the only top-level .safetensors are weights (an inference server loads
// them all), and names the tokenizer's pad token in both model configs. The next run
// of the lineage continues that state, and continues it as well from a checkpoint of
// the older layout (LegacyOptimizerFile at the top level), whose state is verified
// against its record as before.
func TestLoopCheckpointLayout(t *testing.T) {
	start, pad := lineageStart(t, false, "")
	dir := filepath.Dir(start)
	iter1 := filepath.Join(dir, "iter-1")
	res, err := lineageLoop(start, iter1).Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if res.State.Step != 1 {
		t.Fatalf("first run: step %d, want 1", res.State.Step)
	}
	top, _ := filepath.Glob(filepath.Join(iter1, "*.safetensors"))
	if want := []string{filepath.Join(iter1, "model.safetensors")}; !slices.Equal(top, want) {
		t.Errorf("top-level .safetensors = %q, want the weights only %q", top, want)
	}
	c, err := format.ReadCommit(iter1)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := c.File(OptimizerFile); !ok {
		t.Errorf("%s lists %+v, want %s among them", format.CommitFile, c.Files, OptimizerFile)
	}
	checkPad(t, iter1, pad)

	next, err := lineageLoop(iter1, filepath.Join(dir, "iter-2")).Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	legacy := filepath.Join(dir, "iter-1-legacy")
	legacyLayout(t, iter1, legacy)
	if err := format.VerifyCheckpoint(legacy); err != nil {
		t.Fatalf("VerifyCheckpoint of the older layout = %v, want nil", err)
	}
	fromLegacy, err := lineageLoop(legacy, filepath.Join(dir, "iter-2-legacy")).Run(context.Background())
	if err != nil {
		t.Fatalf("continuing a checkpoint of the older layout: %v", err)
	}
	if next.State.Step != 2 || fromLegacy.State.Step != 2 {
		t.Errorf("second runs at steps %d (new layout) and %d (older layout), want 2: the optimizer state continued", next.State.Step, fromLegacy.State.Step)
	}
	weights := func(dir string) string {
		c, err := format.ReadCommit(dir)
		if err != nil {
			t.Fatal(err)
		}
		f, _ := c.File("model.safetensors")
		return f.SHA256
	}
	if got, want := weights(fromLegacy.Dir), weights(next.Dir); got != want {
		t.Errorf("weights continued from the older layout: sha256 %s, want %s as from the new one", got, want)
	}

	// The older layout's state is an input verified against its record, as before.
	opt := filepath.Join(legacy, LegacyOptimizerFile)
	b, err := os.ReadFile(opt)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-3] ^= 1
	if err := os.WriteFile(opt, b, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = lineageLoop(legacy, filepath.Join(dir, "iter-2-flipped")).Run(context.Background())
	if !errors.Is(err, format.ErrCorrupt) || !strings.Contains(err.Error(), opt) {
		t.Errorf("continuing from a flipped %s = %v, want ErrCorrupt naming %s", LegacyOptimizerFile, err, opt)
	}
}

// checkPad fails t unless config.json and generation_config.json of dir name pad as
// pad_token_id.
func checkPad(t *testing.T, dir string, pad int) {
	t.Helper()
	for _, name := range []string{qwen2.ConfigFile, qwen2.GenerationConfigFile} {
		var got struct {
			Pad *int `json:"pad_token_id"`
		}
		b, _ := os.ReadFile(filepath.Join(dir, name))
		if err := json.Unmarshal(b, &got); err != nil || got.Pad == nil || *got.Pad != pad {
			t.Errorf("%s pad_token_id = %v (%v), want %d, the tokenizer's <|endoftext|>", name, got.Pad, err, pad)
		}
	}
}

// TestLoopPadToken: a trained checkpoint names its tokenizer's pad token in both model
// configs, whether From's tokenizer_config.json is copied or generated (From with
// tokenizer.json alone); a pad token From's tokenizer lacks fails before the first step.
func TestLoopPadToken(t *testing.T) {
	tests := []struct {
		name            string
		bare            bool
		tokenizerConfig string
		err             string
	}{
		{"copied", false, "", ""},
		{"generated", true, "", ""},
		{"unknown pad", true, `{"pad_token": "<nope>"}`, `pad_token "<nope>" is no token of the tokenizer`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start, pad := lineageStart(t, tt.bare, tt.tokenizerConfig)
			out := filepath.Join(filepath.Dir(start), "out")
			l := lineageLoop(start, out)
			step := l.Step
			steps := 0
			l.Step = func(k int, m *qwen2.Model, o *AdamW) (lineageMetric, error) {
				steps++
				return step(k, m, o)
			}
			_, err := l.Run(context.Background())
			if tt.err != "" {
				if !errors.Is(err, qwen2.ErrConfig) || !strings.Contains(err.Error(), tt.err) || steps != 0 {
					t.Errorf("Run = %v after %d steps, want ErrConfig with %q before any step", err, steps, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			checkPad(t, out, pad)
		})
	}
}

// TestOptimizerIn finds the optimizer state in either layout, preferring TrainerDir.
func TestOptimizerIn(t *testing.T) {
	tests := []struct {
		name  string
		files []string
		want  string
	}{
		{"trainer dir", []string{OptimizerFile}, OptimizerFile},
		{"older layout", []string{LegacyOptimizerFile}, LegacyOptimizerFile},
		{"both", []string{LegacyOptimizerFile, OptimizerFile}, OptimizerFile},
		{"none", []string{"model.safetensors"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			for _, name := range tt.files {
				path := filepath.Join(dir, filepath.FromSlash(name))
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, nil, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if got, err := OptimizerIn(dir); got != tt.want || err != nil {
				t.Errorf("OptimizerIn = %q, %v, want %q", got, err, tt.want)
			}
		})
	}
}

// TestLoopDiskFull: a training run that fails on a full disk, whether writing a
// snapshot or the checkpoint, says so with the hint the dataset stages give
// (jobs.DiskFull, issue 45: the update and SFT said only "save optimizer: … no space
// left on device"), and what it names as kept is what the rerun resumes from.
func TestLoopDiskFull(t *testing.T) {
	start, _ := lineageStart(t, false, "")
	tests := []struct {
		name    string
		fail    func(l *Loop[lineageMetric], err error)
		resumed int
	}{
		{"step", func(l *Loop[lineageMetric], err error) {
			step := l.Step
			l.Step = func(k int, m *qwen2.Model, o *AdamW) (lineageMetric, error) {
				met, _ := step(k, m, o)
				return met, fmt.Errorf("snapshot: %w", err)
			}
		}, 0},
		{"commit", func(l *Loop[lineageMetric], err error) {
			l.Write = func(string) error { return err }
		}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "ckpt")
			l := lineageLoop(start, out)
			tt.fail(&l, &os.PathError{Op: "write", Path: filepath.Join(out, "x"), Err: syscall.ENOSPC})
			_, err := l.Run(context.Background())
			tmp, _ := filepath.Glob(out + ".tmp-*")
			want := "(disk full: nothing was published; free space and rerun, finished work is kept in " + strings.Join(tmp, "")
			if len(tmp) != 1 || !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), want) {
				t.Fatalf("Run on a full disk = %v, temp dirs %q; want ENOSPC with %q", err, tmp, want)
			}
			res, err := lineageLoop(start, out).Run(context.Background())
			if err != nil {
				t.Fatalf("rerun with space: %v", err)
			}
			if res.Resumed != tt.resumed {
				t.Errorf("rerun with space resumed %d steps, want %d", res.Resumed, tt.resumed)
			}
		})
	}
}
