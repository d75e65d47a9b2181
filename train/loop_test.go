package train

import (
	"slices"
	"testing"
)

// TestSnapshotDue checks WithSnapshotEvery's one meaning: a snapshot after every n-th
// step and after the last step of each epoch; n <= 0 at epoch ends only.
func TestSnapshotDue(t *testing.T) {
	epoch := []int{0, 0, 0, 1, 1, 1, 1, 2} // epochs of 3, 4 and 1 steps
	tests := []struct {
		every int
		want  []int // steps done when a snapshot follows
	}{
		{1, []int{1, 2, 3, 4, 5, 6, 7, 8}},
		{2, []int{2, 3, 4, 6, 7, 8}},
		{3, []int{3, 6, 7, 8}},
		{0, []int{3, 7, 8}},
		{-1, []int{3, 7, 8}},
		{100, []int{3, 7, 8}},
	}
	for _, tt := range tests {
		var got []int
		for k := range epoch {
			if snapshotDue(epoch, k, tt.every) {
				got = append(got, k+1)
			}
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("WithSnapshotEvery(%d): snapshots after steps %v, want %v", tt.every, got, tt.want)
		}
	}
}
