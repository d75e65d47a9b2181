package train

import (
	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/ts"

	"github.com/mempo/mempo/model/torch"
)

// AdamW keeps its state in flat buffers, one set per group of parameters of one dtype
// on one device (the flat-parameter design of fused optimizers): the members' moments, master
// weights and gradients lie back to back, each parameter's state is a view into them,
// and a step is a handful of in-place vector ops over a whole group instead of about
// twenty ops and six full-size temporaries per parameter.

// align is the element alignment of each parameter's range in its group's buffers: 16
// elements, 64 bytes of float32 (libtorch's CPU allocation alignment), so each view
// starts where a tensor of its own would. The padding stays zero through every update.
const align = 16

// stepChunk is how many elements of a group the CPU step updates at a time: the dozen
// element-wise ops of the update run over one chunk before the next, so the chunk's
// gradient, moments, weights and scratch stay in cache (2 MiB L2 and 32 MiB L3 here)
// between ops instead of streaming from memory a dozen times. BenchmarkAdamWChunk,
// 0.5B-shaped with 2 layers (166M float32 parameters), 2 threads, on a machine shared
// with a training job (load 5-7), ms per step: 16K 2000, 64K 1500-1560, 256K 970-1200,
// 1M 940-1040, 4M 1080-1300, the whole group at once 2500-4100. 256K is within noise of
// 1M with a quarter of the scratch.
var stepChunk int64 = 1 << 18

// gpuChunk is the update's chunk on a GPU, where an op over fewer elements gains no
// cache locality and costs a kernel launch: 64M elements, which bounds each scratch
// buffer at 256 MiB of float32.
const gpuChunk = 1 << 26

// normChunk is the most elements of a half-precision gradient the gradient norm casts
// to float32 at once. The cast goes into the group's first scratch buffer, which is
// sized for it (64 MiB on a CPU; a GPU's gpuChunk is larger already), so there is no
// float32 copy of the whole gradient: 16 bytes a parameter instead of 20, what lets a
// 7B update fit one 141 GB GPU (README, "Fitting a 7B update on one GPU"). A parameter
// up to this size gets its norm from one reduction over its whole float32 gradient, as
// from a float32 copy, bit for bit; a larger one (a 152K-token embedding, 7B's MLP
// weights on a GPU) piece by piece (see gradNorm).
var normChunk int64 = 1 << 24

// chunkFor is the update's chunk on dev, given the CPU's. (gotch reports a tensor's
// CPU device as {CPU 1}, not gotch.CPU's {CPU -1}, so compare by kind.)
func chunkFor(dev gotch.Device, cpu int64) int64 {
	if dev.IsCuda() {
		return gpuChunk
	}
	return cpu
}

// group is the parameters of one dtype on one device and their flat buffers.
type group struct {
	dtype   gotch.DType // the parameters' and gradients' dtype
	dev     gotch.Device
	half    bool  // bfloat16 or float16: float32 master weights and moments
	members []int // indices into AdamW.params, in order
	numel   int64 // length of each buffer: the members' ranges, each padded to align

	expAvg, expAvgSq torch.Raw // [numel] moments, float32 when half, else dtype
	grad             torch.Raw // [numel] dtype: each member's gradient is a view into it
	master           torch.Raw // [numel] float32 master weights; only when half
	// Scratch of the update, [workers × min(numel, chunk)] each, except that a half
	// group's tmp is [span] for the gradient norm's float32 casts; the update casts each
	// chunk of the gradient into tmp2 (see updateChunk).
	tmp, tmp2 torch.Raw
	span      int64 // tmp's length
	// workers is how many chunks the CPU update runs at once (torch.Parallel), the
	// thread count when the group was built; each has its chunk of tmp and tmp2.
	workers int
}

// slot is one parameter's place in its group.
type slot struct {
	group      int
	off, numel int64 // the parameter's range in the group's buffers
	// Views of the group's buffers in the parameter's shape; master is nil unless the
	// group is half-precision.
	expAvg, expAvgSq, master *ts.Tensor
	// grad is lent to the parameter as its gradient (see adoptGrads).
	grad torch.Raw
	step int64 // updates applied to this parameter (PyTorch's state["step"])
}

// groupKey identifies a group.
type groupKey struct {
	dtype gotch.DType
	dev   gotch.Device
}

// layout assigns every parameter to a group and a range in it, groups in order of
// first appearance and members in parameter order.
func (o *AdamW) layout() {
	index := map[groupKey]int{}
	for i, p := range o.params {
		k := groupKey{p.T.DType(), p.T.MustDevice()}
		gi, ok := index[k]
		if !ok {
			gi = len(o.groups)
			index[k] = gi
			o.groups = append(o.groups, &group{dtype: k.dtype, dev: k.dev, half: k.dtype == gotch.BFloat16 || k.dtype == gotch.Half})
		}
		g, s := o.groups[gi], &o.slots[i]
		s.group, s.off, s.numel = gi, g.numel, int64(p.T.Numel())
		g.members = append(g.members, i)
		g.numel += (s.numel + align - 1) / align * align
	}
}

// alloc allocates g's buffers, zeroed, with the master weights copied from the
// parameters, and the members' views.
func (o *AdamW) alloc(g *group) {
	shape := []int64{g.numel}
	state := g.dtype
	if g.half {
		state = gotch.Float
		g.master = torch.RawZeros(shape, state, g.dev)
	}
	g.expAvg = torch.RawZeros(shape, state, g.dev)
	g.expAvgSq = torch.RawZeros(shape, state, g.dev)
	g.grad = torch.RawZeros(shape, g.dtype, g.dev)
	chunk := min(g.numel, chunkFor(g.dev, o.chunk))
	g.workers = 1
	if !g.dev.IsCuda() {
		g.workers = int(min(int64(max(torch.NumThreads(), 1)), (g.numel+chunk-1)/chunk))
	}
	g.span = chunk
	if g.half {
		g.span = min(g.numel, max(chunkFor(g.dev, o.chunk), normChunk))
	}
	g.span = max(g.span, int64(g.workers)*chunk)
	g.tmp = torch.RawEmpty([]int64{g.span}, state, g.dev)
	g.tmp2 = torch.RawEmpty([]int64{int64(g.workers) * chunk}, state, g.dev)
	for _, i := range g.members {
		s, size := &o.slots[i], o.params[i].T.MustSize()
		s.expAvg = view(g.expAvg, s.off, size).Wrap()
		s.expAvgSq = view(g.expAvgSq, s.off, size).Wrap()
		s.grad = view(g.grad, s.off, size)
		if !g.half {
			continue
		}
		s.master = view(g.master, s.off, size).Wrap()
		// The parameter may require grad: copy through a detached alias, so the master
		// records no autograd history.
		w := o.handles[i].Detach()
		torch.Of(s.master).CopyFrom(w)
		w.Free()
	}
}

// view is the part of flat from off shaped as shape, a view.
func view(flat torch.Raw, off int64, shape []int64) torch.Raw {
	n := int64(1)
	for _, d := range shape {
		n *= d
	}
	part := flat.Narrow(0, off, n)
	defer part.Free()
	if len(shape) == 0 {
		return part.Squeeze(0)
	}
	return part.View(shape...)
}

// buffers are the tensors g owns, those allocated so far (a failed NewAdamW may leave
// some unmade, and a full-precision group has no master).
func (g *group) buffers() []torch.Raw {
	var out []torch.Raw
	for _, x := range []torch.Raw{g.expAvg, g.expAvgSq, g.grad, g.master, g.tmp, g.tmp2} {
		if x != (torch.Raw{}) {
			out = append(out, x)
		}
	}
	return out
}

// free releases g's buffers; the parameters' gradients must no longer be views.
func (g *group) free() {
	torch.Free(g.buffers()...)
}

// freeRaws frees the raws of xs that were made, skipping zero values (handles and
// views a failed NewAdamW never made).
func freeRaws(xs ...torch.Raw) {
	for _, x := range xs {
		if x != (torch.Raw{}) {
			x.Free()
		}
	}
}

// adoptGrads makes every parameter's gradient its view into the flat gradient buffer
// and reports which parameters have one. A view lent earlier (the usual case: backward
// accumulated into it in place) is kept; a gradient libtorch allocated instead (the
// first backward, or one run in grad mode, which accumulates out of place) is copied
// into the view, which replaces it. A parameter without a gradient keeps none and is
// skipped by the step, as PyTorch skips a None gradient.
func (o *AdamW) adoptGrads() (has []bool) {
	has = make([]bool, len(o.params))
	for i, h := range o.handles {
		var copied bool
		if has[i], copied = AdoptGrad(h, o.slots[i].grad); copied {
			o.adopted++
		}
	}
	return has
}

// AdoptGrad makes view the gradient of the parameter h, as AdamW does with the views
// into its flat buffer: a view lent earlier and accumulated into in place is kept; a
// gradient libtorch allocated instead is copied into view, which replaces it. It
// reports whether h has a gradient, and whether it was copied.
func AdoptGrad(h, view torch.Raw) (defined, copied bool) {
	defined, same := h.GradIs(view)
	if !defined || same {
		return defined, false
	}
	g := h.Grad()
	view.CopyFrom(g)
	g.Free()
	h.AttachGrad(view)
	return true, true
}

// releaseGrads leaves the parameters whose gradient is still a view into the flat
// buffer without a gradient, so freeing the buffer frees its memory.
func (o *AdamW) releaseGrads() {
	for i, h := range o.handles {
		s := &o.slots[i]
		if s.grad == (torch.Raw{}) {
			continue
		}
		if _, same := h.GradIs(s.grad); same {
			h.ClearGrad()
		}
	}
}

// segment is a run of consecutive members of a group that all have a gradient and the
// same step count, so one vector op over the flat range [lo, hi) updates them all
// with the same bias corrections (padding between members included; it stays zero).
type segment struct {
	g       *group
	members []int // indices into AdamW.params
	lo, hi  int64
	step    int64 // the members' step count before this update
}

// segments splits the groups into segments over the parameters that have gradients.
// Usually each group is one segment; a parameter without a gradient, or a step count
// that differs (a parameter that missed updates, in a state file), starts a new one.
func (o *AdamW) segments(has []bool) []segment {
	var out []segment
	for _, g := range o.groups {
		open := false
		for _, i := range g.members {
			s := &o.slots[i]
			if !has[i] {
				open = false
				continue
			}
			if !open || out[len(out)-1].step != s.step {
				out = append(out, segment{g: g, lo: s.off, step: s.step})
				open = true
			}
			last := &out[len(out)-1]
			last.members = append(last.members, i)
			last.hi = s.off + s.numel
		}
	}
	return out
}
