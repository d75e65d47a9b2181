package layout

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// root is the repository root, two folders above this package.
const root = "../.."

// architecture reads docs/architecture.md.
func architecture(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// dirs lists the folders directly under dir (relative to the root) that hold a file
// git would track: hidden folders, testdata and runs/ (run output) are left out.
func dirs(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(root, dir))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		name := e.Name()
		if !e.IsDir() || strings.HasPrefix(name, ".") || name == "testdata" || name == "static" || (dir == "" && (name == "runs" || name == "bin")) {
			continue
		}
		out = append(out, name)
	}
	return out
}

// subcommands are the names `mempo` registers: each app.Command(&cli.Command{Name: …})
// in cmd/mempo, checked against the constructors main.go lists.
func subcommands(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root, "cmd", "mempo", "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	name := regexp.MustCompile(`app\.Command\(&cli\.Command\{\s*Name:\s*"([a-z-]+)"`)
	var out []string
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range name.FindAllSubmatch(b, -1) {
			out = append(out, string(m[1]))
		}
	}
	main, err := os.ReadFile(filepath.Join(root, "cmd", "mempo", "main.go"))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(regexp.MustCompile(`(?m)^\s+[a-zA-Z]+Command\(\),$`).FindAll(main, -1)); n != len(out) || n < 10 {
		t.Fatalf("found subcommands %v, but main.go lists %d: the pattern no longer reads cmd/mempo", out, n)
	}
	slices.Sort(out)
	return out
}

// TestArchitectureNamesTheCode fails when a step, `mempo` subcommand, binary, top-level
// folder or internal package exists that docs/architecture.md does not name, each as
// `stages/x`, `mempo x`, `mempo-x`, `x/` or `internal/x` in backticks.
func TestArchitectureNamesTheCode(t *testing.T) {
	doc := architecture(t)
	named := func(kind, token string) {
		if !strings.Contains(doc, "`"+token+"`") {
			t.Errorf("docs/architecture.md does not name %s `%s`", kind, token)
		}
	}
	for _, d := range dirs(t, "") {
		named("top-level folder", d+"/")
	}
	for _, s := range dirs(t, "stages") {
		named("step", "stages/"+s)
	}
	for _, c := range subcommands(t) {
		named("subcommand", "mempo "+c)
	}
	for _, b := range dirs(t, "cmd") {
		if b != "internal" {
			named("binary", b)
		}
	}
	for _, dir := range []string{"internal", "cmd/internal"} {
		for _, p := range dirs(t, dir) {
			named("internal package", dir+"/"+p)
		}
	}
}

// TestArchitectureNamesOnlyTheCode is the reverse: every step, internal package and
// subcommand docs/architecture.md names in backticks exists.
func TestArchitectureNamesOnlyTheCode(t *testing.T) {
	doc := architecture(t)
	for _, m := range regexp.MustCompile("`((?:stages|internal|cmd/internal|model|train|agent)/[a-z0-9]+)`").FindAllStringSubmatch(doc, -1) {
		if st, err := os.Stat(filepath.Join(root, m[1])); err != nil || !st.IsDir() {
			t.Errorf("docs/architecture.md names `%s`, which is no package", m[1])
		}
	}
	cmds := subcommands(t)
	for _, m := range regexp.MustCompile("`mempo ([a-z-]+)`").FindAllStringSubmatch(doc, -1) {
		if !slices.Contains(cmds, m[1]) {
			t.Errorf("docs/architecture.md names `mempo %s`, which is no subcommand (have %v)", m[1], cmds)
		}
	}
	for _, m := range regexp.MustCompile("(?m)^\\| `([a-z]+)/` \\|").FindAllStringSubmatch(doc, -1) {
		if st, err := os.Stat(filepath.Join(root, m[1])); err != nil || !st.IsDir() {
			t.Errorf("docs/architecture.md's layout names `%s/`, which is no folder", m[1])
		}
	}
}

// TestResultTablesNameTheirTarget: every table of figures in the README and the results
// and performance pages is introduced by the command that prints it (a `make …` or
// `go test …` in backticks within the 12 lines before it), so a reader can re-measure
// it and a stale table shows.
func TestResultTablesNameTheirTarget(t *testing.T) {
	cmd := regexp.MustCompile("`(?:[A-Z_]+=\\S+ )*(make [a-z-]|go test |build/go.sh test )")
	for _, f := range []string{"README.md", "docs/results.md", "docs/performance.md"} {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(string(b), "\n")
		tables := 0
		for i, l := range lines {
			if !strings.HasPrefix(l, "|") || (i > 0 && strings.HasPrefix(lines[i-1], "|")) {
				continue
			}
			tables++
			before := strings.Join(lines[max(0, i-12):i], "\n")
			if strings.HasPrefix(l, "| binary |") || strings.HasPrefix(l, "| path |") || strings.HasPrefix(l, "| quantity |") {
				continue // reference tables, not figures
			}
			if !cmd.MatchString(before) {
				t.Errorf("%s:%d: a table of figures without the command that prints it (`make …` or `go test …`) in the 12 lines before it", f, i+1)
			}
		}
		if tables == 0 {
			t.Errorf("%s: no table found", f)
		}
	}
}
