package torch

import (
	"bytes"
	"encoding/binary"
	"slices"
	"testing"

	"github.com/sugarme/gotch"

	"github.com/mempo/mempo/model/safetensors"
)

// roundTrip copies data to a tensor of shape and back as T.
func roundTrip[S, T Elem](t *testing.T, data []S, shape []int64) []T {
	t.Helper()
	r := RawFromHost(data, shape, gotch.CPU)
	defer r.Free()
	if got := r.Size(); !slices.Equal(got, shape) && !(len(got) == 0 && len(shape) == 0) {
		t.Fatalf("RawFromHost(%v).Size() = %v, want %v", shape, got, shape)
	}
	return ToHost[T](r)
}

func TestHostRoundTrip(t *testing.T) {
	base := Live()
	defer func() {
		if got := Live(); got != base {
			t.Errorf("Live() = %d, want %d", got, base)
		}
	}()
	if got := roundTrip[int64, int64](t, []int64{1, -2, 3, 1 << 40, 5, 6}, []int64{2, 3}); !slices.Equal(got, []int64{1, -2, 3, 1 << 40, 5, 6}) {
		t.Errorf("int64 round trip = %v", got)
	}
	if got := roundTrip[float32, float64](t, []float32{0.1, -2.5}, []int64{2}); !slices.Equal(got, []float64{float64(float32(0.1)), -2.5}) {
		t.Errorf("float32 → float64 = %v", got)
	}
	if got := roundTrip[bool, float32](t, []bool{true, false, true}, []int64{3, 1}); !slices.Equal(got, []float32{1, 0, 1}) {
		t.Errorf("bool → float32 = %v", got)
	}
	if got := roundTrip[float64, float64](t, []float64{7}, nil); !slices.Equal(got, []float64{7}) {
		t.Errorf("0-dim round trip = %v", got)
	}
	if got := roundTrip[float32, float32](t, nil, []int64{0, 4}); len(got) != 0 {
		t.Errorf("empty round trip = %v", got)
	}
}

func TestZerosScalar(t *testing.T) {
	z := RawZeros(nil, gotch.Int64, gotch.CPU)
	defer z.Free()
	if s, n := z.Size(), len(z.Bytes()); s != nil || n != 8 {
		t.Errorf("RawZeros(nil).Size() = %v with %d bytes, want [] with 8", s, n)
	}
}

func TestWriteItem(t *testing.T) {
	x := FromHost([]float32{1.5, -2}, []int64{2, 1}, gotch.CPU)
	defer x.MustDrop()
	// A transposed view is not contiguous; Write still gives row-major bytes.
	tr := Of(x).Transpose(0, 1).Wrap()
	defer tr.MustDrop()
	var got bytes.Buffer
	if err := Write(&got, tr); err != nil {
		t.Fatal(err)
	}
	var want bytes.Buffer
	binary.Write(&want, binary.LittleEndian, []float32{1.5, -2})
	if !bytes.Equal(got.Bytes(), want.Bytes()) {
		t.Errorf("Write = %x, want %x", got.Bytes(), want.Bytes())
	}
	one := FromHost([]float64{3.25}, nil, gotch.CPU)
	defer one.MustDrop()
	if got := Item(one); got != 3.25 {
		t.Errorf("Item = %v, want 3.25", got)
	}
}

func TestSafetensorsDTypes(t *testing.T) {
	for _, d := range []gotch.DType{gotch.Float, gotch.BFloat16, gotch.Half, gotch.Double, gotch.Int64} {
		s, ok := ToSafetensors(d)
		if !ok {
			t.Errorf("ToSafetensors(%v) not ok", d)
			continue
		}
		if back, ok := FromSafetensors(s); !ok || back != d {
			t.Errorf("FromSafetensors(%s) = %v, %v; want %v", s, back, ok, d)
		}
	}
	if _, ok := ToSafetensors(gotch.Bool); ok {
		t.Error("ToSafetensors(Bool) ok, want not stored")
	}
	if _, ok := FromSafetensors(safetensors.I32); ok {
		t.Error("FromSafetensors(I32) ok, want not read")
	}
}
