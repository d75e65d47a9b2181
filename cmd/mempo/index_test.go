package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/mempo/mempo/cmd/internal/app"
	"github.com/mempo/mempo/format"
)

// mempo index builds and commits an index, reports its progress, finds it up to date
// on a rerun and refuses a missing corpus with exit 2.
func TestIndexCommand(t *testing.T) {
	run := func(args ...string) (code int, stdout, stderr string) {
		a := &cli.App{Name: "mempo", Commands: []*cli.Command{indexCommand()}}
		app.Prepare(a)
		var out, errOut strings.Builder
		a.Writer, a.ErrWriter = &out, &errOut
		code = app.Main(a, append([]string{"mempo", "index"}, args...))
		return code, out.String(), errOut.String()
	}
	dir := t.TempDir()
	corpus := filepath.Join(dir, "corpus.jsonl")
	body := `{"id": "1", "contents": "\"Varnak\"\nVarnak is a city on the river Oss."}` + "\n" +
		`{"id": "2", "contents": "\"Tessaly\"\nTessaly is known for its copper mines."}` + "\n"
	if err := os.WriteFile(corpus, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "index")
	code, stdout, stderr := run("--corpus", corpus, "--out", out)
	if code != app.ExitOK || !strings.Contains(stdout, "2 passages from "+corpus) || !strings.Contains(stderr, "index: ") {
		t.Fatalf("mempo index = exit %d, stdout %q, stderr %q; want 2 passages and a progress line", code, stdout, stderr)
	}
	if c, err := format.ReadCommit(out); err != nil || c.Stage != "index" {
		t.Errorf("ReadCommit(%s) = %+v, %v; want the record of stage index", out, c, err)
	}
	if code, stdout, _ = run("--corpus", corpus, "--out", out); code != app.ExitOK || !strings.Contains(stdout, "up to date (2 passages") {
		t.Errorf("mempo index again = exit %d, stdout %q; want up to date", code, stdout)
	}
	if code, _, stderr = run("--corpus", filepath.Join(dir, "absent.jsonl"), "--out", out); code != app.ExitUsage || !strings.Contains(stderr, "--corpus") {
		t.Errorf("mempo index --corpus absent = exit %d, stderr %q; want %d naming --corpus", code, stderr, app.ExitUsage)
	}
}
