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

// TestValidateRefusesOverflow: a loss weight or clip constant that would overflow the
// float32 loss is refused before any work, naming the flag, the value and the range
// (issue 45).
func TestValidateRefusesOverflow(t *testing.T) {
	for _, c := range []struct {
		set  func(*Config)
		want string
	}{
		{func(c *Config) { c.Objective.KLCoef = 1e308 }, "--kl-coef 1e+308: want a number in [0, 1e+06]"},
		{func(c *Config) { c.Objective.EntropyCoef = 1e39 }, "--entropy-coef 1e+39: want a number in [0, 1e+06]"},
		{func(c *Config) { c.Objective.Clip.High = 1e308 }, "--clip-high 1e+308: want a number in [0, 1e+06]"},
		{func(c *Config) { c.Objective.Clip.DualC = 2e6 }, "--dual-clip 2e+06: want c in (1, 1e+06]"},
	} {
		cfg := DefaultConfig()
		c.set(&cfg)
		if err := cfg.Validate(); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Validate = %v, want ErrConfig saying %q", err, c.want)
		}
	}
}
