package sft

import (
	"errors"
	"strings"
	"testing"
)

// TestValidateRefusesOverflow: a --context-loss-weight that would overflow the float32
// loss is refused before any work, naming the flag, the value and the range (issue 45).
func TestValidateRefusesOverflow(t *testing.T) {
	cfg := DefaultConfig()
	cfg.ContextLossWeight = 1e308
	const want = "--context-loss-weight 1e+308: want a number in [0, 1e+06]"
	if err := cfg.Validate(); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), want) {
		t.Errorf("Validate = %v, want ErrConfig saying %q", err, want)
	}
}
