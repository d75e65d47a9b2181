package train

import (
	"fmt"
	"math"
	"slices"
	"sort"

	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/ts"

	"github.com/mempo/mempo/model/torch"
)

// State key suffixes and the schedule key. A parameter's entries are its name plus a
// suffix, as PyTorch's state_dict keeps exp_avg, exp_avg_sq and step per parameter.
const (
	keyExpAvg   = ".exp_avg"
	keyExpAvgSq = ".exp_avg_sq"
	keyMaster   = ".master" // float32 master weights of a half-precision parameter
	keyStep     = ".step"   // int64 []: updates applied to the parameter
	// KeySteps is the int64 [] count of optimizer steps, the LR schedule's position.
	KeySteps = "step"
)

// State is a copy of the optimizer's state, for saving with the checkpoint: for each
// parameter <name>.exp_avg and <name>.exp_avg_sq (its master's dtype and shape),
// <name>.master for a half-precision parameter, and <name>.step (int64, 0-dim); and
// "step", the optimizer step count (int64, 0-dim). The caller owns and drops the
// tensors; LoadState of the same map into an optimizer over parameters equal to these
// continues bit for bit as this one would.
func (o *AdamW) State() (st map[string]*ts.Tensor, err error) {
	st = make(map[string]*ts.Tensor, 4*len(o.params)+1)
	defer func() {
		if err != nil {
			for _, t := range st {
				t.MustDrop()
			}
			st = nil
		}
	}()
	defer torch.Catch("adamw state", &err)
	for i, p := range o.params {
		s := o.slots[i]
		st[p.Name+keyExpAvg] = clone(s.expAvg)
		st[p.Name+keyExpAvgSq] = clone(s.expAvgSq)
		if s.master != nil {
			st[p.Name+keyMaster] = clone(s.master)
		}
		st[p.Name+keyStep] = count(s.step)
	}
	st[KeySteps] = count(o.steps)
	return st, nil
}

// clone is a copy of t's values with its own storage and no autograd history
// (detach_copy alone records a node that cannot be differentiated).
func clone(t *ts.Tensor) *ts.Tensor {
	d := torch.Must(t.Detach(false))
	return torch.Must(d.DetachCopy(true))
}

// count is n as an int64 0-dim tensor.
func count(n int64) *ts.Tensor { return torch.FromHost([]int64{n}, nil, gotch.CPU) }

// LoadState replaces the optimizer's state with st, as State wrote it: every key must be
// present with the shape and dtype this optimizer holds, and no other key. Nothing
// changes unless all of st is valid. The caller keeps ownership of st.
func (o *AdamW) LoadState(st map[string]*ts.Tensor) (err error) {
	defer torch.Catch("adamw load state", &err)
	type entry struct {
		dst, src *ts.Tensor
	}
	var copies []entry
	steps := make([]int64, len(o.params))
	want := map[string]bool{KeySteps: true}

	readCount := func(key string) (int64, error) {
		t, ok := st[key]
		if !ok || t == nil {
			return 0, fmt.Errorf("adamw load state: key %q missing: %w", key, ErrInput)
		}
		if t.DType() != gotch.Int64 || t.Numel() != 1 {
			return 0, fmt.Errorf("adamw load state: key %q: dtype %v shape %v, want int64 []: %w", key, t.DType(), t.MustSize(), ErrInput)
		}
		v := torch.Item(t)
		if v < 0 || v != math.Trunc(v) {
			return 0, fmt.Errorf("adamw load state: key %q: %v, want a count >= 0: %w", key, v, ErrInput)
		}
		return int64(v), nil
	}
	for i, p := range o.params {
		s := o.slots[i]
		named := []struct {
			suffix string
			dst    *ts.Tensor
		}{{keyExpAvg, s.expAvg}, {keyExpAvgSq, s.expAvgSq}}
		if s.master != nil {
			named = append(named, struct {
				suffix string
				dst    *ts.Tensor
			}{keyMaster, s.master})
		}
		for _, n := range named {
			key := p.Name + n.suffix
			want[key] = true
			t, ok := st[key]
			if !ok || t == nil {
				return fmt.Errorf("adamw load state: key %q missing: %w", key, ErrInput)
			}
			if got, w := t.MustSize(), n.dst.MustSize(); !slices.Equal(got, w) || t.DType() != n.dst.DType() {
				return fmt.Errorf("adamw load state: key %q: dtype %v shape %v, want %v %v: %w", key, t.DType(), got, n.dst.DType(), w, ErrInput)
			}
			copies = append(copies, entry{n.dst, t})
		}
		key := p.Name + keyStep
		want[key] = true
		if steps[i], err = readCount(key); err != nil {
			return err
		}
	}
	total, err := readCount(KeySteps)
	if err != nil {
		return err
	}
	var extra []string
	for k := range st {
		if !want[k] {
			extra = append(extra, k)
		}
	}
	if len(extra) > 0 {
		sort.Strings(extra)
		return fmt.Errorf("adamw load state: unexpected keys %q (parameters of another model?): %w", extra, ErrInput)
	}

	for _, c := range copies {
		torch.Copy(c.dst, c.src)
	}
	for i := range o.slots {
		o.slots[i].step = steps[i]
	}
	o.steps = total
	return nil
}
