package update

import (
	"errors"
	"strings"
	"testing"
)

// Every error Validate returns is ErrConfig — the objective's and the optimizer's too,
// which the train package checks — and names the flag that sets the bad value.
func TestValidateNamesFlags(t *testing.T) {
	for _, c := range []struct {
		flag string
		set  func(*Config)
	}{
		{"--lr", func(c *Config) { c.AdamW.LR = -1 }},
		{"--max-grad-norm", func(c *Config) { c.AdamW.MaxGradNorm = -1 }},
		{"--kl-coef", func(c *Config) { c.Objective.KLCoef = -1 }},
		{"--entropy-coef", func(c *Config) { c.Objective.EntropyCoef = -1 }},
		{"--clip-low", func(c *Config) { c.Objective.Clip.Low = 1 }},
		{"--dual-clip", func(c *Config) { c.Objective.Clip.DualC = 1 }},
		{"--agg", func(c *Config) { c.Objective.Agg = "mean" }},
		{"--mini-batches", func(c *Config) { c.MiniBatches = 0 }},
	} {
		cfg := DefaultConfig()
		c.set(&cfg)
		err := cfg.Validate()
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), c.flag) {
			t.Errorf("Validate with a bad %s = %v, want ErrConfig naming %s", c.flag, err, c.flag)
		}
	}
	if err := DefaultConfig().Validate(); err != nil {
		t.Errorf("Validate(DefaultConfig()) = %v", err)
	}
}
