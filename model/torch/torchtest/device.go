package torchtest

import (
	"os"
	"testing"

	"github.com/sugarme/gotch"
	lib "github.com/sugarme/gotch/libtch"

	"github.com/mempo/mempo/model/torch"
)

// The device and precision the tensor benchmarks and the device parity tests
// (*_device_test.go) run in, chosen per `go test` process so that one set of
// benchmarks measures every machine (build/gpu_check runs them on a GPU):
//
//	MEMPO_TEST_DEVICE=cuda MEMPO_TEST_DTYPE=bfloat16 build/go.sh test -run '^$' -bench LogProbs05B ./model/qwen2/
//
// Unset, benchmarks run on the CPU in float32 as before and the parity tests skip.
const (
	EnvDevice = "MEMPO_TEST_DEVICE" // cpu, cuda or cuda:N
	EnvDType  = "MEMPO_TEST_DTYPE"  // float32, bfloat16 or float16; unset: float32
)

// Device is the device the benchmarks run on: MEMPO_TEST_DEVICE, "cpu" when unset.
func Device() string {
	if d := os.Getenv(EnvDevice); d != "" {
		return d
	}
	return "cpu"
}

// DType is the weight precision the benchmarks run in: MEMPO_TEST_DTYPE, "" (the
// preset's float32) when unset.
func DType() string { return os.Getenv(EnvDType) }

// Large skips a benchmark sized for an accelerator (the 1.5B-shaped ones, decoding at
// batch 64) unless MEMPO_TEST_DEVICE is set, so that `make bench` on a CPU keeps its
// length; MEMPO_TEST_DEVICE=cpu runs it on the CPU.
func Large(b *testing.B) {
	if os.Getenv(EnvDevice) == "" {
		b.Skipf("sized for an accelerator: set %s (cuda, or cpu to run it here)", EnvDevice)
	}
}

// ParityDevice is the device the parity tests compare against the CPU: it skips t
// with the reason when MEMPO_TEST_DEVICE is unset or names a device this libtorch
// build or machine lacks. MEMPO_TEST_DEVICE=cpu compares the CPU with itself, which
// exercises the tests where there is no accelerator.
func ParityDevice(t testing.TB) string {
	t.Helper()
	name := os.Getenv(EnvDevice)
	if name == "" {
		t.Skipf("device parity: %s is unset; set it to cuda (or cpu to compare the CPU with itself)", EnvDevice)
	}
	if _, err := torch.Device(name); err != nil {
		t.Skipf("device parity: %s=%s: %v", EnvDevice, name, err)
	}
	return name
}

// Sync waits until the benchmark device has finished the work queued on it. CUDA
// kernels run asynchronously, so a timer must not stop before they do; on the CPU it
// does nothing.
func Sync() {
	d := benchDevice()
	if d.IsCuda() {
		lib.AtcSynchronize(int64(d.Value))
	}
}

// benchDevice resolves Device, panicking on a name torch.Device rejects: a benchmark
// cannot run on a device that is not there.
func benchDevice() gotch.Device {
	d, err := torch.Device(Device())
	if err != nil {
		panic(err)
	}
	return d
}

// benchDType resolves DType to the dtype of the roofline measurements.
func benchDType() gotch.DType {
	switch DType() {
	case "bfloat16":
		return gotch.BFloat16
	case "float16":
		return gotch.Half
	}
	return gotch.Float
}
