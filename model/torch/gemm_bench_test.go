package torch

import (
	"fmt"
	"testing"

	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/ts"
)

// BenchmarkGEMM measures the fp32 matmul throughput libtorch reaches on this machine,
// on the torch thread at its count. Model benchmarks report their FLOP rate as a
// fraction of this figure (DESIGN.md §10).
func BenchmarkGEMM(b *testing.B) {
	for _, n := range []int64{256, 1024} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			x := ts.MustRandn([]int64{n, n}, gotch.Float, gotch.CPU)
			y := ts.MustRandn([]int64{n, n}, gotch.Float, gotch.CPU)
			defer x.MustDrop()
			defer y.MustDrop()
			for b.Loop() {
				Do(func() { x.MustMm(y, false).MustDrop() })
			}
			flops := 2 * float64(n*n*n) * float64(b.N)
			b.ReportMetric(flops/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}
