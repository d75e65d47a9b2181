package main

import (
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/mempo/mempo/cmd/internal/app"
)

// inspect refuses a bad invocation with exit 2 and says why, and a directory it cannot
// read with exit 1 naming it.
func TestInspectExits(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nothing")
	tests := []struct {
		args []string
		code int
		msg  string
	}{
		{nil, app.ExitUsage, "want exactly one dataset directory"},
		{[]string{"--turns", "--top-memories", "3", "d"}, app.ExitUsage, "two audits"},
		{[]string{"--head", "-1", "d"}, app.ExitUsage, "--head must be at least 0"},
		{[]string{"--turns"}, app.ExitUsage, "want one or more rollouts dataset directories"},
		{[]string{missing}, app.ExitFailure, missing},
		{[]string{"--turns", missing}, app.ExitFailure, "inspect --turns: "},
	}
	for _, tt := range tests {
		a := &cli.App{Name: "mempo", Commands: []*cli.Command{inspectCommand()}}
		app.Prepare(a)
		var stderr strings.Builder
		a.Writer, a.ErrWriter = io.Discard, &stderr
		if code := app.Main(a, append([]string{"mempo", "inspect"}, tt.args...)); code != tt.code || !strings.Contains(stderr.String(), tt.msg) {
			t.Errorf("mempo inspect %q = exit %d, stderr %q; want %d mentioning %q", tt.args, code, stderr.String(), tt.code, tt.msg)
		}
	}
}
