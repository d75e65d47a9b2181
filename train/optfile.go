package train

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	"github.com/mempo/mempo/internal/renameio"
	"github.com/mempo/mempo/model/safetensors"
	"github.com/mempo/mempo/model/torch"
	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/ts"
)

// The optimizer state's place in a checkpoint directory. It lies in TrainerDir, not
// beside the weights as HF Trainer's optimizer.pt does: an inference server such as vLLM
// loads every *.safetensors at the top of a model directory as weights, so nothing but
// the model's weights may be a top-level .safetensors.
const (
	// TrainerDir holds what only training reads back: the optimizer state.
	TrainerDir = "trainer"
	// OptimizerFile is the optimizer state's file, relative to the checkpoint directory
	// and slash-separated, as checkpoint.json names its files.
	OptimizerFile = TrainerDir + "/optimizer.safetensors"
	// LegacyOptimizerFile is where checkpoints and snapshots written before TrainerDir
	// hold the optimizer state; they are still read (OptimizerIn).
	LegacyOptimizerFile = "optimizer.safetensors"
)

// OptimizerIn returns the name, relative to dir, of the optimizer state of the checkpoint
// or snapshot dir: OptimizerFile, else LegacyOptimizerFile in one of the older layout;
// "" when dir holds neither.
func OptimizerIn(dir string) (string, error) {
	for _, name := range []string{OptimizerFile, LegacyOptimizerFile} {
		_, err := os.Stat(filepath.Join(dir, filepath.FromSlash(name)))
		if err == nil {
			return name, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("optimizer state of %s: %w", dir, err)
		}
	}
	return "", nil
}

// SaveOptimizer writes o.State() to path as safetensors, one tensor at a time through
// host memory; the keys are State's, so the file reads like a PyTorch optimizer
// state_dict flattened by parameter name. Path's directory is created when missing
// (TrainerDir in a checkpoint), and its entry made durable.
func SaveOptimizer(path string, o *AdamW) (err error) {
	if err := mkdirSynced(filepath.Dir(path)); err != nil {
		return fmt.Errorf("save optimizer %s: %w", path, err)
	}
	st, err := o.State()
	if err != nil {
		return fmt.Errorf("save optimizer %s: %w", path, err)
	}
	defer func() {
		for _, t := range st {
			t.MustDrop()
		}
	}()
	names := make([]string, 0, len(st))
	for k := range st {
		names = append(names, k)
	}
	sort.Strings(names)
	var tensors []safetensors.Tensor
	for _, name := range names {
		t := st[name]
		dt, ok := torch.ToSafetensors(t.DType())
		if !ok {
			return fmt.Errorf("save optimizer %s: %q has dtype %v, no safetensors dtype: %w", path, name, t.DType(), ErrInput)
		}
		tensors = append(tensors, safetensors.Tensor{Name: name, DType: dt, Shape: t.MustSize(),
			WriteData: func(w io.Writer) (err error) {
				defer torch.Catch("save optimizer "+name, &err)
				return torch.Write(w, t)
			}})
	}
	meta := safetensors.DefaultMetadata()
	meta["mempo.optimizer"] = "adamw"
	if err := safetensors.WriteFile(path, tensors, meta); err != nil {
		return fmt.Errorf("save optimizer: %w", err)
	}
	return nil
}

// LoadOptimizer reads a file SaveOptimizer wrote into o (AdamW.LoadState): the state
// must name exactly o's parameters with their shapes and dtypes, else nothing changes
// and the error names the key and the file.
func LoadOptimizer(path string, o *AdamW) (err error) {
	f, err := safetensors.Open(path)
	if err != nil {
		return fmt.Errorf("load optimizer: %w", err)
	}
	defer f.Close()
	st := map[string]*ts.Tensor{}
	defer func() {
		for _, t := range st {
			t.MustDrop()
		}
	}()
	defer torch.Catch("load optimizer "+path, &err)
	for _, info := range f.Tensors() {
		dt, ok := torch.FromSafetensors(info.DType)
		if !ok {
			return fmt.Errorf("load optimizer %s: %q has dtype %s, want F32, F64, BF16, F16 or I64: %w", path, info.Name, info.DType, ErrInput)
		}
		t := torch.RawZeros(info.Shape, dt, gotch.CPU).Wrap()
		st[info.Name] = t
		if err := f.ReadInto(info.Name, torch.Of(t).Bytes()); err != nil {
			return fmt.Errorf("load optimizer: %w", err)
		}
	}
	if err := o.LoadState(st); err != nil {
		return fmt.Errorf("load optimizer %s: %w", path, err)
	}
	return nil
}

// mkdirSynced creates dir when missing and syncs its parent, so that the new entry
// survives a crash as the files written into it do (renameio syncs only their own
// directory).
func mkdirSynced(dir string) error {
	if _, err := os.Stat(dir); err == nil {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return renameio.Sync(filepath.Dir(dir))
}
