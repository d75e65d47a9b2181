package format

import (
	"errors"
	"testing"
)

func roll(uid string, sample, turn int32) Rollout {
	return Rollout{UID: uid, Sample: sample, Turn: turn}
}

func TestTrajectories(t *testing.T) {
	rows := []Rollout{roll("a", 0, 0), roll("a", 0, 1), roll("a", 1, 0), roll("b", 0, 0), roll("b", 0, 1), roll("b", 0, 2)}
	got, err := Trajectories(rows)
	if err != nil {
		t.Fatal(err)
	}
	var lens []int
	for _, tr := range got {
		lens = append(lens, len(tr))
	}
	if len(lens) != 3 || lens[0] != 2 || lens[1] != 1 || lens[2] != 3 {
		t.Errorf("Trajectories lengths = %v, want [2 1 3]", lens)
	}
	if got, err := Trajectories(nil); err != nil || len(got) != 0 {
		t.Errorf("Trajectories(nil) = %v, %v; want empty", got, err)
	}
}

func TestTrajectoriesRejects(t *testing.T) {
	tests := []struct {
		name string
		rows []Rollout
	}{
		{"gap in turns", []Rollout{roll("a", 0, 0), roll("a", 0, 2)}},
		{"starts late", []Rollout{roll("a", 0, 1)}},
		{"unsorted samples", []Rollout{roll("a", 1, 0), roll("a", 0, 0)}},
		{"unsorted uids", []Rollout{roll("b", 0, 0), roll("a", 0, 0)}},
		{"second starts late", []Rollout{roll("a", 0, 0), roll("a", 1, 1)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := Trajectories(tt.rows); !errors.Is(err, ErrSchemaMismatch) {
				t.Errorf("Trajectories = %v, want ErrSchemaMismatch", err)
			}
		})
	}
}
