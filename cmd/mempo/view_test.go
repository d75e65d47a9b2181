package main

import (
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/mempo/mempo/cmd/internal/app"
)

// mempo view listens on loopback by default and refuses, with exit 2, an address
// other machines could reach unless --allow-remote says so, or a run that is not there.
func TestViewFlags(t *testing.T) {
	run := func(args ...string) (code int, stdout, stderr string) {
		a := &cli.App{Name: "mempo", Commands: []*cli.Command{viewCommand()}}
		app.Prepare(a)
		var out, errOut strings.Builder
		a.Writer, a.ErrWriter = &out, &errOut
		code = app.Main(a, append([]string{"mempo", "view"}, args...))
		return code, out.String(), errOut.String()
	}
	code, help, _ := run("--help")
	if code != app.ExitOK {
		t.Fatalf("view --help: exit %d", code)
	}
	for _, want := range []string{"--run", "--addr", "--allow-remote", "127.0.0.1:8080"} {
		if !strings.Contains(help, want) {
			t.Errorf("view --help lacks %q:\n%s", want, help)
		}
	}
	dir := t.TempDir()
	for _, tt := range []struct {
		name string
		args []string
		msg  string
	}{
		{"no run", nil, "run"},
		{"remote address", []string{"--run", dir, "--addr", "0.0.0.0:8080"}, "--allow-remote"},
		{"all interfaces", []string{"--run", dir, "--addr", ":8080"}, "--allow-remote"},
		{"missing run", []string{"--run", dir + "/nope", "--addr", "127.0.0.1:0"}, "--run"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, _, stderr := run(tt.args...)
			if code != app.ExitUsage || !strings.Contains(stderr, tt.msg) {
				t.Errorf("mempo view %q = exit %d, stderr %q; want %d mentioning %q", tt.args, code, stderr, app.ExitUsage, tt.msg)
			}
		})
	}
}
