package advantage

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"
)

// grpo.json comes from testdata/golden.py, which computes the outcome advantage the way
// verl's compute_grpo_outcome_advantage does and the memory part from DESIGN.md §7;
// regenerate with `cd testdata && python3 golden.py`. verl computes in float32, so values
// are compared within 1e-6.
const goldenTol = 1e-6

type goldenTurn struct {
	UID         string  `json:"uid"`
	Sample      int     `json:"sample"`
	Turn        int     `json:"turn"`
	ResponseLen int     `json:"response_len"`
	Mem         *Span   `json:"mem"`
	Content     *Span   `json:"content"`
	PMem        float64 `json:"p_mem"`
	PFull       float64 `json:"p_full"`
	PCtx        float64 `json:"p_ctx"`
}

type goldenDoc struct {
	Scores []struct {
		UID    string  `json:"uid"`
		Sample int     `json:"sample"`
		Reward float64 `json:"reward"`
	} `json:"scores"`
	Turns []goldenTurn `json:"turns"`
	Cases []struct {
		Config struct {
			NoStdNorm   bool    `json:"no_std_norm"`
			MemBaseline string  `json:"mem_baseline"`
			MemPool     string  `json:"mem_pool"`
			MemCoef     float64 `json:"mem_coef"`
			ContentOnly bool    `json:"mem_content_only"`
		} `json:"config"`
		Rows []struct {
			AdvOutcome float64   `json:"adv_outcome"`
			MemReward  float64   `json:"mem_reward"`
			AdvMemory  float64   `json:"adv_memory"`
			Advantages []float64 `json:"advantages"`
		} `json:"rows"`
	} `json:"cases"`
}

func TestComputeMatchesGolden(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "grpo.json"))
	if err != nil {
		t.Fatalf("read golden: %v (regenerate with: cd testdata && python3 golden.py)", err)
	}
	var g goldenDoc
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatalf("parse testdata/grpo.json: %v", err)
	}
	scores := make([]Score, len(g.Scores))
	for i, s := range g.Scores {
		scores[i] = Score{UID: s.UID, Sample: s.Sample, Reward: s.Reward}
	}
	turns := make([]Turn, len(g.Turns))
	for i, t := range g.Turns {
		turns[i] = Turn(t)
	}
	if len(g.Cases) < 5 {
		t.Fatalf("golden holds %d configs, want 5", len(g.Cases))
	}
	for _, c := range g.Cases {
		name := c.Config.MemBaseline + "/" + c.Config.MemPool
		if c.Config.ContentOnly {
			name += "/content-only"
		}
		t.Run(name, func(t *testing.T) {
			base, err := ParseBaseline(c.Config.MemBaseline)
			if err != nil {
				t.Fatal(err)
			}
			cfg := Config{NoStdNorm: c.Config.NoStdNorm, MemBaseline: base, MemPool: Pool(c.Config.MemPool), MemCoef: c.Config.MemCoef,
				MemContentOnly: c.Config.ContentOnly}
			rows, _, err := Compute(cfg, scores, turns)
			if err != nil {
				t.Fatalf("Compute: %v", err)
			}
			if len(rows) != len(c.Rows) {
				t.Fatalf("Compute returned %d rows, want %d", len(rows), len(c.Rows))
			}
			bad := 0
			near := func(what string, i int, got, want float64) {
				if math.Abs(got-want) > goldenTol {
					bad++
					if bad < 10 {
						t.Errorf("row %d (%s sample %d turn %d): %s = %v, want %v", i, rows[i].UID, rows[i].Sample, rows[i].Turn, what, got, want)
					}
				}
			}
			for i, w := range c.Rows {
				got := rows[i]
				near("adv_outcome", i, got.AdvOutcome, w.AdvOutcome)
				near("mem_reward", i, got.MemReward, w.MemReward)
				near("adv_memory", i, got.AdvMemory, w.AdvMemory)
				if len(got.Advantages) != len(w.Advantages) {
					t.Errorf("row %d: %d token advantages, want %d", i, len(got.Advantages), len(w.Advantages))
					continue
				}
				for j := range w.Advantages {
					near(fmt.Sprintf("advantages[%d]", j), i, float64(got.Advantages[j]), w.Advantages[j])
				}
			}
		})
	}
}
