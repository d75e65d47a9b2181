// Package apptest checks a command's flag bindings from its tests.
package apptest

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/mempo/mempo/cmd/internal/app"
	"github.com/mempo/mempo/jobs"
)

// Replay runs a command bound by fs with args and a --config file holding recorded
// as a stage records its config (jobs.CanonicalJSON, the config object of a manifest
// or trainer_state.json), and fails t unless the flags resolve. The command's own
// action does not run; the caller compares the config fs is bound to with recorded,
// and reads what the action would read itself (--seed) from the returned context.
func Replay(t *testing.T, fs *app.Flags, recorded any, args ...string) *cli.Context {
	t.Helper()
	data, err := jobs.CanonicalJSON(recorded)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	var ctx *cli.Context
	a := app.New("replay", "", fs, func(c *cli.Context) error { ctx = c; return nil })
	var stderr strings.Builder
	a.Writer, a.ErrWriter = io.Discard, &stderr
	if code := app.Main(a, append([]string{"replay", "--config", path}, args...)); code != app.ExitOK {
		t.Fatalf("replaying %s: exit %d: %s", data, code, stderr.String())
	}
	return ctx
}
