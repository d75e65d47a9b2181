package dataparallel

import (
	"fmt"
	"os"
	"slices"

	"github.com/sugarme/gotch"
	"golang.org/x/sys/unix"

	"github.com/mempo/mempo/model/torch"
	"github.com/mempo/mempo/train"
)

// The processes of a group share one anonymous memory file (memfd), mapped by each:
// a region of the leader's weights, which every worker copies into its replica
// before a step, then one region per worker for the gradients of its share, which
// the worker's backward pass accumulates into in place and the leader adds into its
// own. Every region lays the parameters out the same way (a layout).

// align is the byte alignment of each parameter in a region (a cache line, and
// libtorch's CPU allocation alignment).
const align = 64

// param is one weight's place in a region.
type param struct {
	Name  string
	Shape []int64
	Kind  int32 // the dtype, as libtorch numbers it (gotch.CKind2DType)
	Off   int64 // bytes from the region's start
	Bytes int64
}

// layout places params back to back, each aligned; Size is one region's bytes.
type layout struct {
	Params []param
	Size   int64
}

// layoutOf lays out the weights of m (trainable parameters, in train.Trainable's order).
func layoutOf(ps []train.Param) layout {
	var l layout
	for _, p := range ps {
		n := int64(p.T.Numel()) * int64(p.T.DType().Size())
		l.Params = append(l.Params, param{Name: p.Name, Shape: p.T.MustSize(), Kind: int32(p.T.DType().CKind()), Off: l.Size, Bytes: n})
		l.Size += (n + align - 1) / align * align
	}
	return l
}

// check reports the first difference between l and the layout of ps.
func (l layout) check(ps []train.Param) error {
	mine := layoutOf(ps)
	if len(mine.Params) != len(l.Params) {
		return fmt.Errorf("the replica has %d weights, the leader %d", len(mine.Params), len(l.Params))
	}
	for i, p := range mine.Params {
		q := l.Params[i]
		if p.Name != q.Name || !slices.Equal(p.Shape, q.Shape) || p.Kind != q.Kind || p.Off != q.Off {
			return fmt.Errorf("weight %d: the replica has %s %v %v, the leader %s %v %v", i,
				p.Name, p.Shape, gotch.CKind2DType(p.Kind), q.Name, q.Shape, gotch.CKind2DType(q.Kind))
		}
	}
	return nil
}

// mapping is the group's shared memory as one process maps it.
type mapping struct {
	file *os.File
	mem  []byte
}

// create makes a memory file of n bytes and maps it.
func create(n int64) (*mapping, error) {
	fd, err := unix.MemfdCreate("mempo-dataparallel", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("shared memory: %w", err)
	}
	f := os.NewFile(uintptr(fd), "mempo-dataparallel")
	if err := f.Truncate(n); err != nil {
		f.Close()
		return nil, fmt.Errorf("shared memory of %d bytes: %w", n, err)
	}
	return attach(f)
}

// attach maps the whole of f, shared.
func attach(f *os.File) (*mapping, error) {
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("shared memory: %w", err)
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("shared memory: map %d bytes: %w", st.Size(), err)
	}
	return &mapping{file: f, mem: mem}, nil
}

func (m *mapping) close() {
	unix.Munmap(m.mem)
	m.file.Close()
}

// views are tensors over one region of a mapping: each parameter's, in its shape, and
// the whole region as one flat byte tensor (for zeroing it in one op).
type views struct {
	params []torch.Raw
	flat   torch.Raw
}

// views makes region r's views; they alias the mapping, which must outlive them.
func (m *mapping) views(l layout, r int) (v views, err error) {
	defer func() {
		if err != nil {
			v.free()
			v = views{}
		}
	}()
	defer torch.Catch("shared memory views", &err)
	base := int64(r) * l.Size
	v.flat = torch.RawOver(m.mem[base:base+l.Size], gotch.Uint8)
	for _, p := range l.Params {
		flat := torch.RawOver(m.mem[base+p.Off:base+p.Off+p.Bytes], gotch.CKind2DType(p.Kind))
		shaped := flat.View(p.Shape...)
		flat.Free()
		v.params = append(v.params, shaped)
	}
	return v, nil
}

func (v views) free() {
	torch.Free(v.params...)
	if v.flat != (torch.Raw{}) {
		v.flat.Free()
	}
}

// handles are a second handle to each parameter's tensor, for the gradient calls.
func handles(ps []train.Param) []torch.Raw {
	out := make([]torch.Raw, len(ps))
	for i, p := range ps {
		out[i] = torch.Of(p.T).Alias()
	}
	return out
}
