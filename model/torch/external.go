package torch

// #include <stdint.h>
// char *mempo_torch_from_memory(void **out, void *data, int64_t numel, int scalar_type);
import "C"

import (
	"fmt"
	"unsafe"

	"github.com/sugarme/gotch"
)

// RawOver is a 1-D CPU tensor of dtype dt over mem, which it aliases: no copy, and
// writes through either show in both. mem must not be Go memory (cgo forbids C to keep
// a Go pointer) and must outlive the tensor, which does not free it: a shared-memory
// mapping that several processes read and write, for example. len(mem) must be a
// multiple of dt's size and mem aligned to it.
func RawOver(mem []byte, dt gotch.DType) Raw {
	size := int(dt.Size())
	if len(mem)%size != 0 || uintptr(unsafe.Pointer(unsafe.SliceData(mem)))%uintptr(size) != 0 {
		panic(fmt.Sprintf("tensor over memory: %d bytes at %p are not whole aligned %v elements", len(mem), unsafe.SliceData(mem), dt))
	}
	return cpp(func(out *unsafe.Pointer) *C.char {
		return C.mempo_torch_from_memory(out, unsafe.Pointer(unsafe.SliceData(mem)), C.int64_t(len(mem)/size), C.int(dt.CInt()))
	})
}
