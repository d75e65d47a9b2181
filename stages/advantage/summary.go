package advantage

import "math"

// Stats describes one component over the values it takes; Std is the population standard
// deviation. An empty set has Count 0 and zeros elsewhere, never NaN.
type Stats struct {
	Count int     `json:"count"`
	Mean  float64 `json:"mean"`
	Std   float64 `json:"std"`
	Min   float64 `json:"min"`
	Max   float64 `json:"max"`
}

// Summary is what the advantage stage reports alongside its dataset.
type Summary struct {
	// Outcome is over trajectories, MemReward and MemAdvantage over memories, Token over
	// every response token of every turn (the float32 values written).
	Outcome      Stats `json:"adv_outcome"`
	MemReward    Stats `json:"mem_reward"`
	MemAdvantage Stats `json:"adv_memory"`
	Token        Stats `json:"advantages"`
	// Groups counts questions; ZeroSpreadGroups those of two or more trajectories whose
	// rewards are all equal, which carry no outcome signal.
	Groups              int     `json:"groups"`
	ZeroSpreadGroups    int     `json:"zero_spread_groups"`
	ZeroSpreadGroupFrac float64 `json:"zero_spread_group_frac"`
	// Pools counts memory pools; ZeroSpreadPools those with fewer than two memories or all
	// rewards equal, whose memory advantages are 0.
	Pools              int     `json:"mem_pools"`
	ZeroSpreadPools    int     `json:"zero_spread_pools"`
	ZeroSpreadPoolFrac float64 `json:"zero_spread_pool_frac"`
	// Memories counts turns with a <mem>.
	Memories int `json:"memories"`
}

// statsOf sums left to right, like the rest of the package.
func statsOf(xs []float64) Stats {
	if len(xs) == 0 {
		return Stats{}
	}
	s := Stats{Count: len(xs), Min: xs[0], Max: xs[0]}
	sum := 0.0
	for _, x := range xs {
		sum += x
		s.Min = min(s.Min, x)
		s.Max = max(s.Max, x)
	}
	s.Mean = sum / float64(len(xs))
	ss := 0.0
	for _, x := range xs {
		d := x - s.Mean
		ss += d * d
	}
	s.Std = math.Sqrt(ss / float64(len(xs)))
	return s
}

func frac(n, of int) float64 {
	if of == 0 {
		return 0
	}
	return float64(n) / float64(of)
}
