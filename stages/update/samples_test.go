package update

import (
	"errors"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mempo/mempo/format"
	"github.com/mempo/mempo/format/formattest"
	"github.com/mempo/mempo/model/qwen2"
)

// writeRows writes the three datasets of an iteration from rows, for LoadSamples.
type rows struct {
	r []format.Rollout
	l []format.Logprob
	a []format.Advantage
}

func writeRows(t *testing.T, x rows) (string, string, string) {
	t.Helper()
	rolls, lps, advs := x.r, x.l, x.a
	dir := t.TempDir()
	r, l, a := filepath.Join(dir, "rollouts"), filepath.Join(dir, "logprobs"), filepath.Join(dir, "advantages")
	if _, err := formattest.WriteDataset(r, "test", [][]format.Rollout{rolls}); err != nil {
		t.Fatal(err)
	}
	if _, err := formattest.WriteDataset(l, "test", [][]format.Logprob{lps}); err != nil {
		t.Fatal(err)
	}
	if _, err := formattest.WriteDataset(a, "test", [][]format.Advantage{advs}); err != nil {
		t.Fatal(err)
	}
	return r, l, a
}

func TestLoadSamples(t *testing.T) {
	good := func() rows {
		rolls := []format.Rollout{
			{UID: "q", Sample: 0, Turn: 0, PromptIDs: []int32{1, 2}, ResponseIDs: []int32{3, 4, 5}},
			{UID: "q", Sample: 0, Turn: 1, PromptIDs: []int32{1, 2, 6}, ResponseIDs: []int32{7}},
			{UID: "q", Sample: 1, Turn: 0, PromptIDs: []int32{1}, ResponseIDs: nil}, // no tokens: skipped
		}
		lps := []format.Logprob{
			{UID: "q", Sample: 0, Turn: 0, OldLogprobs: []float32{-1, -2, -3}, RefLogprobs: []float32{-1, -2, -3}},
			{UID: "q", Sample: 0, Turn: 1, OldLogprobs: []float32{-1}, RefLogprobs: []float32{-1}},
			{UID: "q", Sample: 1, Turn: 0},
		}
		advs := []format.Advantage{
			{UID: "q", Sample: 0, Turn: 0, Advantages: []float32{1, 1, 1}},
			{UID: "q", Sample: 0, Turn: 1, Advantages: []float32{1}},
			{UID: "q", Sample: 1, Turn: 0},
		}
		return rows{rolls, lps, advs}
	}
	r, l, a := writeRows(t, good())
	got, err := LoadSamples(r, l, a, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || !slices.Equal(got[0].Response, []int64{3, 4, 5}) || !slices.Equal(got[1].Context, []int64{1, 2, 6}) {
		t.Errorf("LoadSamples = %+v, want the two turns with response tokens in rollouts order", got)
	}

	tests := []struct {
		name  string
		edit  func(x rows) rows
		ref   bool
		words []string // the error names these
	}{
		{"advantages short", func(x rows) rows {
			x.a[1].Advantages = []float32{1, 2}
			return x
		}, true, []string{"row 1", `"advantages"`, "2 values, want 1", "do not match the rollouts", "turn 1"}},
		{"old log-probs long", func(x rows) rows {
			x.l[0].OldLogprobs = append(x.l[0].OldLogprobs, -4)
			return x
		}, true, []string{"row 0", `"old_logprobs"`, "4 values, want 3"}},
		{"ref missing with kl on", func(x rows) rows {
			x.l[0].RefLogprobs = nil
			return x
		}, true, []string{`"ref_logprobs"`, "0 values, want 3"}},
		{"advantage NaN", func(x rows) rows {
			x.a[0].Advantages[2] = float32(math.NaN())
			return x
		}, true, []string{"row 0", "value 2 is NaN"}},
		{"positive old log-prob", func(x rows) rows {
			x.l[1].OldLogprobs[0] = 0.5
			return x
		}, true, []string{"logprobs", "row 1", `"old_logprobs"`, "value 0 is 0.5", "<= 0"}},
		{"positive ref log-prob", func(x rows) rows {
			x.l[0].RefLogprobs[1] = 2
			return x
		}, true, []string{"row 0", `"ref_logprobs"`, "value 1 is 2"}},
		{"turn without advantages", func(x rows) rows {
			x.a = x.a[:1]
			return x
		}, true, []string{"rollouts", "row 1", "no advantages row"}},
		{"advantages of another turn", func(x rows) rows {
			x.a = append(x.a, format.Advantage{UID: "z", Turn: 0})
			return x
		}, true, []string{"advantages", "row 3", "uid z", "not a turn of the rollouts"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, l, a := writeRows(t, tt.edit(good()))
			_, err := LoadSamples(r, l, a, tt.ref)
			if !errors.Is(err, ErrInput) {
				t.Fatalf("LoadSamples = %v, want ErrInput", err)
			}
			for _, w := range tt.words {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %q", err, w)
				}
			}
		})
	}
	t.Run("ref ignored with kl off", func(t *testing.T) {
		x := good()
		x.l[0].RefLogprobs = nil
		r, l, a := writeRows(t, x)
		if _, err := LoadSamples(r, l, a, false); err != nil {
			t.Errorf("LoadSamples without reference = %v, want nil", err)
		}
	})
}

func TestPlan(t *testing.T) {
	plan := func(seed uint64) []Batch {
		p, err := Plan(10, 2, 3, rand.New(rand.NewPCG(seed, planStream)))
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	p := plan(1)
	if len(p) != 6 {
		t.Fatalf("Plan has %d mini-batches, want 2 epochs × 3", len(p))
	}
	for e := range 2 {
		var all []int
		for _, b := range p[3*e : 3*e+3] {
			if n := len(b.Samples); n < 3 || n > 4 || b.Epoch != e {
				t.Errorf("epoch %d mini-batch %d: %d samples, epoch %d; want 3 or 4 in epoch %d", e, b.Index, n, b.Epoch, e)
			}
			all = append(all, b.Samples...)
		}
		slices.Sort(all)
		if !slices.Equal(all, []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}) {
			t.Errorf("epoch %d covers %v, want every sample once", e, all)
		}
	}
	if again := plan(1); !slices.EqualFunc(p, again, func(a, b Batch) bool { return slices.Equal(a.Samples, b.Samples) }) {
		t.Errorf("Plan with the same seed differs")
	}
	if other := plan(2); slices.EqualFunc(p, other, func(a, b Batch) bool { return slices.Equal(a.Samples, b.Samples) }) {
		t.Errorf("Plan with another seed is the same")
	}
}

func TestMicro(t *testing.T) {
	lengths := map[int]int{0: 5, 1: 9, 2: 3, 3: 9, 4: 30}
	length := func(i int) int { return lengths[i] }
	tests := []struct {
		budget int
		want   [][]int
	}{
		{0, [][]int{{0, 1, 2, 3, 4}}},
		{20, [][]int{{4}, {1, 3}, {0, 2}}},
		{27, [][]int{{4}, {1, 3, 0}, {2}}},
		{1, [][]int{{4}, {1}, {3}, {0}, {2}}},
	}
	for _, tt := range tests {
		if got := qwen2.BudgetBatches([]int{0, 1, 2, 3, 4}, length, tt.budget); !slices.EqualFunc(got, tt.want, slices.Equal) {
			t.Errorf("qwen2.BudgetBatches(budget %d) = %v, want %v", tt.budget, got, tt.want)
		}
	}
}
