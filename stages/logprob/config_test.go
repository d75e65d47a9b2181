package logprob

import (
	"errors"
	"math"
	"strings"
	"testing"
)

// Validate names the flag of the first bad setting, as the update's does, and wraps
// ErrConfig.
func TestValidateNamesFlags(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("DefaultConfig().Validate() = %v", err)
	}
	for _, c := range []struct {
		flag string
		edit func(*Config)
	}{
		{"--token-budget", func(c *Config) { c.TokenBudget = 0 }},
		{"--chunk", func(c *Config) { c.Chunk = 0 }},
		{"--temperature", func(c *Config) { c.Temperature = math.NaN() }},
		{"--device", func(c *Config) { c.Device = "" }},
		{"--p-ctx", func(c *Config) { c.MemoryPass, c.PCtx = false, true }},
		{"--memory-pass", func(c *Config) { c.MemoryPass, c.AnswerOpen = true, "" }},
	} {
		cfg := DefaultConfig()
		c.edit(&cfg)
		err := cfg.Validate()
		if !errors.Is(err, ErrConfig) || !strings.HasPrefix(err.Error(), c.flag) {
			t.Errorf("%s: Validate() = %v, want an ErrConfig starting with the flag", c.flag, err)
		}
	}
}
