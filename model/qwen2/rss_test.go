package qwen2

import (
	"runtime/debug"
	"testing"

	"github.com/mempo/mempo/internal/procstat"
	"github.com/mempo/mempo/model/torch"
)

func rssKB(t *testing.T) int {
	t.Helper()
	debug.FreeOSMemory()
	kb, ok := procstat.KB("VmRSS")
	if !ok {
		t.Skip("no VmRSS in /proc/self/status on this platform")
	}
	return int(kb)
}

// TestRSSFlat runs 1500 forward passes after a warm-up and checks resident memory
// stays within 2 MB (measured: about 0.2 MB). Through gotch's generated wrappers a
// two-layer model grew by about 5 KB per pass (see model/torch/ops.go), which here
// would be several MB. The passes run on the torch thread, as the stages' do: from a
// goroutine that changes OS threads, each thread's glibc arena kept its own free
// memory, and under load RSS grew 2.4-2.7 MB with no leak.
func TestRSSFlat(t *testing.T) {
	if testing.Short() {
		t.Skip("runs 1500 forward passes")
	}
	c := testConfig()
	c.NumLayers = 1
	m := newTestModel(t, c, Options{})
	b := NewBatch([][]int64{{1, 2, 3}, {4}}, []int{0, 0}, nil, 0)
	run := func(n int) {
		torch.Do(func() {
			for range n {
				ids, pos, mask := m.tensors(b)
				l := m.Forward(ids, pos, mask, nil)
				torch.Drop(ids, pos, mask, l)
			}
		})
	}
	run(300)
	before := rssKB(t)
	run(1500)
	after := rssKB(t)
	t.Logf("RSS %d KB -> %d KB over 1500 forward passes", before, after)
	if after-before > 2048 {
		t.Errorf("RSS grew %d KB over 1500 forward passes, want <= 2048", after-before)
	}
}
