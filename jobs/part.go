package jobs

import (
	"fmt"
	"strconv"
	"strings"
)

// Part selects slice Index of Count of a stage's shard plan, for scale-out over an array
// job. The zero Part is the whole plan.
type Part struct {
	Index, Count int
}

// ParsePart parses "i/N" (0 <= i < N), the --shard flag's syntax.
func ParsePart(s string) (Part, error) {
	is, ns, ok := strings.Cut(s, "/")
	i, err1 := strconv.Atoi(is)
	n, err2 := strconv.Atoi(ns)
	if !ok || err1 != nil || err2 != nil || n < 1 || i < 0 || i >= n {
		return Part{}, fmt.Errorf("shard %q: want i/N with 0 <= i < N, e.g. 0/4: %w", s, ErrSpec)
	}
	return Part{Index: i, Count: n}, nil
}

// Whole reports whether p is the whole plan.
func (p Part) Whole() bool { return p.Count == 0 }

// String is "i/N", or "all" for the whole plan.
func (p Part) String() string {
	if p.Whole() {
		return "all"
	}
	return fmt.Sprintf("%d/%d", p.Index, p.Count)
}

// dir is the part's directory name under <out>/_parts/.
func (p Part) dir() string { return fmt.Sprintf("%d-of-%d", p.Index, p.Count) }

// Range is the half-open range of plan shards p covers out of shards. Parts are
// contiguous and in order, so concatenating parts 0..N-1 gives the plan's order and a
// merge renumbers shards exactly as an unsharded run numbers them.
func (p Part) Range(shards int) (lo, hi int) {
	if p.Whole() {
		return 0, shards
	}
	return p.Index * shards / p.Count, (p.Index + 1) * shards / p.Count
}

func (p Part) validate() error {
	if p.Whole() && p.Index == 0 {
		return nil
	}
	if p.Count < 1 || p.Index < 0 || p.Index >= p.Count {
		return fmt.Errorf("part %d/%d: want 0 <= i < N: %w", p.Index, p.Count, ErrSpec)
	}
	return nil
}
