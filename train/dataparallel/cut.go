package dataparallel

// cut splits items of the given costs, in order, into at most parts contiguous runs
// of about equal cost, every run non-empty: fewer runs than parts only when there are
// fewer items. Run k is items [bounds[k], bounds[k+1]). Each cut falls where the
// running cost comes closest to its share of the total.
func cut(costs []int, parts int) (bounds []int) {
	n := len(costs)
	parts = max(min(parts, n), 1)
	total := 0
	for _, c := range costs {
		total += c
	}
	bounds = append(bounds, 0)
	sum, i := 0, 0
	for k := 1; k < parts; k++ {
		target := float64(total) * float64(k) / float64(parts)
		// Take at least one item, and leave one for each run after this one.
		sum += costs[i]
		i++
		for i < n-(parts-k) {
			next := float64(sum + costs[i])
			if next-target > target-float64(sum) {
				break
			}
			sum += costs[i]
			i++
		}
		bounds = append(bounds, i)
	}
	return append(bounds, n)
}
