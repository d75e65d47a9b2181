package main

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/mempo/mempo/cmd/internal/app"
	"github.com/mempo/mempo/model/torch"
)

// versionOut runs a, as mempo's main does (linked), with args and returns its stdout.
func versionOut(t *testing.T, a *cli.App, args ...string) string {
	t.Helper()
	var stdout, stderr strings.Builder
	a.Writer, a.ErrWriter = &stdout, &stderr
	if code := app.Main(linked(a), args); code != app.ExitOK {
		t.Fatalf("%q = exit %d, stderr %q; want 0", args, code, stderr.String())
	}
	return stdout.String()
}

// wantVersion checks that out, what `mempo version` or --version printed for name,
// names the revision, the libtorch this binary links and its devices.
func wantVersion(t *testing.T, name, out string) {
	t.Helper()
	devices := "cpu"
	if torch.CUDABuilt() {
		devices = "cpu, cuda"
	}
	for _, want := range []string{
		name + " " + app.ReadBuild().Short() + " (libtorch " + torch.Version() + ", " + devices + ")\n",
		"\nrevision: ", "\nmodified: ", "\ngo:       go",
		"\nlibtorch: " + torch.Version() + "\n",
		"\ndevices:  " + devices + "\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("%s version output lacks %q:\n%s", name, want, out)
		}
	}
	if !strings.HasPrefix(out, name+" ") {
		t.Errorf("%s version output does not start with its name:\n%s", name, out)
	}
}

func TestVersion(t *testing.T) {
	tools := func() *cli.App {
		a := &cli.App{Name: "mempo", Commands: []*cli.Command{versionCommand()}}
		app.Prepare(a)
		return a
	}
	got := versionOut(t, tools(), "mempo", "version")
	wantVersion(t, "mempo", got)
	if flag := versionOut(t, tools(), "mempo", "--version"); flag != got {
		t.Errorf("mempo --version printed\n%s\nmempo version printed\n%s\nwant the same", flag, got)
	}
}

// TestStageVersion: --version on every stage run through mempo (a symlink named after
// it) exits 0 before its required flags are checked and names mempo's libtorch, which
// that process links even for the pure-Go stages.
func TestStageVersion(t *testing.T) {
	for _, name := range slices.Sorted(maps.Keys(stageApps)) {
		t.Run(name, func(t *testing.T) {
			wantVersion(t, name, versionOut(t, stageApp(name), name, "--version"))
		})
	}
}
