package train

import (
	"fmt"
	"io"
	"sort"
	"unsafe"

	"github.com/mempo/mempo/model/safetensors"
	"github.com/mempo/mempo/model/torch"
	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/ts"
)

// OptimizerFile is the optimizer state's file in a checkpoint directory.
const OptimizerFile = "optimizer.safetensors"

var stTypes = map[gotch.DType]safetensors.DType{
	gotch.Float: safetensors.F32, gotch.Double: safetensors.F64, gotch.BFloat16: safetensors.BF16,
	gotch.Half: safetensors.F16, gotch.Int64: safetensors.I64,
}

// SaveOptimizer writes o.State() to path as safetensors, one tensor at a time through
// host memory; the keys are State's, so the file reads like a PyTorch optimizer
// state_dict flattened by parameter name.
func SaveOptimizer(path string, o *AdamW) (err error) {
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
		dt, ok := stTypes[t.DType()]
		if !ok {
			return fmt.Errorf("save optimizer %s: %q has dtype %v, no safetensors dtype: %w", path, name, t.DType(), ErrInput)
		}
		tensors = append(tensors, safetensors.Tensor{Name: name, DType: dt, Shape: t.MustSize(),
			WriteData: func(w io.Writer) (err error) {
				defer torch.Catch("save optimizer "+name, &err)
				b := hostBytes(t)
				_, err = w.Write(b)
				return err
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
		var dt gotch.DType
		found := false
		for g, s := range stTypes {
			if s == info.DType {
				dt, found = g, true
			}
		}
		if !found {
			return fmt.Errorf("load optimizer %s: %q has dtype %s, want F32, F64, BF16, F16 or I64: %w", path, info.Name, info.DType, ErrInput)
		}
		t := zerosCPU(info.Shape, dt)
		st[info.Name] = t
		if err := f.ReadInto(info.Name, storage(t)); err != nil {
			return fmt.Errorf("load optimizer: %w", err)
		}
	}
	if err := o.LoadState(st); err != nil {
		return fmt.Errorf("load optimizer %s: %w", path, err)
	}
	return nil
}

// zerosCPU allocates a zeroed CPU tensor; a 0-dim one is squeezed from [1], since
// gotch's generated constructors index the shape slice and cannot take [].
func zerosCPU(shape []int64, dt gotch.DType) *ts.Tensor {
	if len(shape) == 0 {
		t := torch.Must(ts.Zeros([]int64{1}, dt, gotch.CPU))
		return torch.Must(t.SqueezeDim(0, true))
	}
	return torch.Must(ts.Zeros(shape, dt, gotch.CPU))
}

// hostBytes copies t's values, row-major, into a new byte slice.
func hostBytes(t *ts.Tensor) []byte {
	h := torch.Must(t.To(gotch.CPU, false))
	c := torch.Must(h.Contiguous(true))
	defer c.MustDrop()
	return append([]byte(nil), storage(c)...)
}

// storage aliases the bytes of a contiguous CPU tensor; valid while t lives.
func storage(t *ts.Tensor) []byte {
	n := int(t.Numel()) * int(t.DType().Size())
	if n == 0 {
		return nil
	}
	ptr, err := t.DataPtr()
	if err != nil {
		panic(err)
	}
	return unsafe.Slice((*byte)(ptr), n)
}
