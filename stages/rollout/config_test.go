package rollout

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/mempo/mempo/format"
)

func TestSelectPrompts(t *testing.T) {
	var sorted []format.Prompt
	for i := range 5 {
		sorted = append(sorted, format.Prompt{UID: fmt.Sprintf("u%d", i)})
	}
	uids := func(ps []format.Prompt) []string {
		var out []string
		for _, p := range ps {
			out = append(out, p.UID)
		}
		return out
	}
	tests := []struct {
		offset, limit int
		want          []string
	}{
		{0, 0, []string{"u0", "u1", "u2", "u3", "u4"}},
		{0, 2, []string{"u0", "u1"}},
		{2, 2, []string{"u2", "u3"}},
		{4, 2, []string{"u0", "u4"}}, // wraps, then sorted by uid
		{6, 2, []string{"u1", "u2"}},
		{3, 9, []string{"u0", "u1", "u2", "u3", "u4"}}, // each prompt once
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%d+%d", tt.offset, tt.limit), func(t *testing.T) {
			cfg := Config{PromptOffset: tt.offset, PromptLimit: tt.limit}
			if got := uids(cfg.selectPrompts(sorted)); !slices.Equal(got, tt.want) {
				t.Errorf("selectPrompts(offset %d, limit %d) = %v, want %v", tt.offset, tt.limit, got, tt.want)
			}
		})
	}
}

func TestValidateTemperature(t *testing.T) {
	for _, temp := range []float64{math.Inf(1), math.Inf(-1), math.NaN(), -1} {
		cfg := DefaultConfig()
		cfg.Temperature = temp
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "--temperature") {
			t.Errorf("Validate(temperature %v) = %v, want an error naming --temperature", temp, err)
		}
	}
}
