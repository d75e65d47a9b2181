package pipelines

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestDemoTable runs build/demo_table.sh, which make demo ends with: it says whether the
// table the demo printed equals the README's, exits 0 either way, and --write puts the
// measured table into the README. The repository's README holds the markers and a table.
func TestDemoTable(t *testing.T) {
	dir := t.TempDir()
	results := filepath.Join(dir, "results.md")
	readme := filepath.Join(dir, "README.md")
	table := "| policy | K | F1 |\n| --- | --- | --- |\n| sft | 2 | 0.219 |\n"
	write := func(path, s string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run := func(args ...string) string {
		t.Helper()
		out, err := exec.Command("../build/demo_table.sh", args...).CombinedOutput()
		if err != nil {
			t.Fatalf("demo_table.sh %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	write(results, table+"\nDifference vs grpo:\n\n| policy | K | F1 |\n| --- | --- | --- |\n| sft | 2 | +0.000 |\n")
	write(readme, "# x\n\n<!-- demo-table: make demo prints this table -->\n"+strings.Replace(table, "0.219", "0.203", 1)+"<!-- /demo-table -->\n\nReading it.\n")
	if out := run(results, readme); !strings.Contains(out, "DIFFERS") || !strings.Contains(out, "> | sft | 2 | 0.219 |") {
		t.Errorf("a README with another F1: %s; want DIFFERS and the measured row", out)
	}
	run("--write", results, readme)
	b, err := os.ReadFile(readme)
	if err != nil {
		t.Fatal(err)
	}
	if want := "<!-- demo-table: make demo prints this table -->\n" + table + "<!-- /demo-table -->\n\nReading it.\n"; !strings.HasSuffix(string(b), want) {
		t.Errorf("README after --write:\n%s\nwant it to end with\n%s", b, want)
	}
	if out := run(results, readme); !strings.Contains(out, "equal") {
		t.Errorf("after --write: %s; want equal", out)
	}

	b, err = os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "<!-- demo-table")
	held, _, closed := strings.Cut(rest, "<!-- /demo-table -->")
	if !ok || !closed || strings.Count(held, "\n| sft |") != 3 || strings.Count(held, "\n| mempo |") != 3 {
		t.Errorf("README.md's demo table: want the markers around rows of sft and mempo at three K:\n%s", held)
	}
}
