package format

import "fmt"

// Trajectories splits a shard's rollout rows into trajectories: runs of one (uid, sample)
// with turns 0, 1, 2, … in order. Rollout shards are written sorted by (uid, sample, turn);
// anything else is an error naming the row, since every later stage relies on that order.
func Trajectories(rows []Rollout) ([][]Rollout, error) {
	var out [][]Rollout
	start := 0
	for i := range rows {
		r := &rows[i]
		if i > start {
			prev := &rows[i-1]
			if r.UID == prev.UID && r.Sample == prev.Sample {
				if r.Turn != prev.Turn+1 {
					return nil, fmt.Errorf("rollouts row %d: uid %s sample %d: turn %d follows turn %d, want consecutive turns: %w",
						i, r.UID, r.Sample, r.Turn, prev.Turn, ErrSchemaMismatch)
				}
				continue
			}
			if r.UID < prev.UID || (r.UID == prev.UID && r.Sample < prev.Sample) {
				return nil, fmt.Errorf("rollouts row %d: uid %s sample %d after uid %s sample %d, want rows sorted by (uid, sample, turn): %w",
					i, r.UID, r.Sample, prev.UID, prev.Sample, ErrSchemaMismatch)
			}
			out = append(out, rows[start:i])
			start = i
		}
		if r.Turn != 0 && i == start {
			return nil, fmt.Errorf("rollouts row %d: uid %s sample %d starts at turn %d, want 0: %w",
				i, r.UID, r.Sample, r.Turn, ErrSchemaMismatch)
		}
	}
	if start < len(rows) {
		out = append(out, rows[start:])
	}
	return out, nil
}
