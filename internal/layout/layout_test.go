package layout

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/mempo/mempo/"

// pkg is the part of `go list -json` the rule reads.
type pkg struct {
	ImportPath   string
	Imports      []string
	TestImports  []string
	XTestImports []string
}

// listModule lists every package of the module with its imports. cgo stays on so that
// the files importing "C" (and gotch) are listed too; listing compiles nothing.
func listModule(t *testing.T) []pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-json", module+"...")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var pkgs []pkg
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p pkg
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		p.ImportPath = strings.TrimPrefix(p.ImportPath, module)
		pkgs = append(pkgs, p)
	}
	if len(pkgs) < 20 {
		t.Fatalf("go list found %d packages; the module is bigger than that", len(pkgs))
	}
	return pkgs
}

// top is the first element of a module-relative import path.
func top(path string) string {
	top, _, _ := strings.Cut(path, "/")
	return top
}

// floor is the layer of a top-level folder: a package imports only from lower floors,
// or from its own folder where sameFolder allows it.
var floor = map[string]int{
	"cmd": 5, "pipelines": 5,
	"stages": 4,
	// audit holds the readers of committed directories (mempo inspect, verify, view):
	// like a stage it reads datasets and checkpoints (and model/bpe's tokenizer) and only
	// cmd/ imports it, but it is no step of the pipeline and commits nothing.
	"audit": 4,
	"train": 3, "model": 3, "agent": 3,
	"jobs": 2, "format": 2,
	"internal": 1,
}

// serving ranks the model packages that serve a policy above the rest of model/: the
// server (2) drives the continuous-batching engine (1), which drives the architecture.
func serving(path string) int {
	switch {
	case path == "model/serve" || strings.HasPrefix(path, "model/serve/"):
		return 2
	case path == "model/engine" || strings.HasPrefix(path, "model/engine/"):
		return 1
	}
	return 0
}

// violation returns why from may not import to (both module-relative), or "".
func violation(from, to string) string {
	ff, ft := top(from), top(to)
	lf, okf := floor[ff]
	lt, okt := floor[ft]
	switch {
	case !okf || !okt:
		return fmt.Sprintf("%s or %s is outside the layout of DESIGN.md §1", ff, ft)
	case strings.HasSuffix(to, "test"):
		return "test harnesses (…test packages) are for tests only"
	case ff == "stages" && ft == "stages":
		return "a stage never imports another stage; stages talk through datasets and checkpoints"
	case ff == "model" && ft == "model" && serving(from) < serving(to):
		return "the architecture knows no engine and the engine no server: model/serve → model/engine → model/qwen2"
	case ff == ft:
		return "" // within one folder (model/qwen2 → model/torch, jobs/jobstest → jobs, …)
	case ff == "agent" && ft == "jobs":
		return "the environment reads what is on disk through format; committing it (jobs) is a step's, as stages/index commits the search index"
	case ff == "train" && ft == "model":
		return "" // training updates the model's weights
	case ff == "jobs" && ft == "format":
		return "" // the runtime commits datasets in the format
	case ff == "model" && ft == "jobs":
		return "the model reads and verifies checkpoints through format; how they are committed (jobs) is the stages' and train's"
	case lt >= lf:
		return fmt.Sprintf("%s (floor %d) may only import lower floors, not %s (floor %d)", ff, lf, ft, lt)
	}
	return ""
}

func TestImportRule(t *testing.T) {
	for _, p := range listModule(t) {
		for _, imp := range p.Imports {
			if rel, ok := strings.CutPrefix(imp, module); ok {
				if why := violation(p.ImportPath, rel); why != "" {
					t.Errorf("%s imports %s: %s", p.ImportPath, rel, why)
				}
			}
			if strings.HasPrefix(imp, "github.com/sugarme/gotch") && top(p.ImportPath) != "model" && top(p.ImportPath) != "train" {
				t.Errorf("%s imports %s: only model/ and train/ import gotch", p.ImportPath, imp)
			}
		}
	}
}

// Tests may cross a boundary that code may not: a boundary test runs the real upstream
// stage to feed the one under test. They still never reach upward into cmd/.
func TestTestImports(t *testing.T) {
	for _, p := range listModule(t) {
		for _, imp := range append(p.TestImports, p.XTestImports...) {
			rel, ok := strings.CutPrefix(imp, module)
			if ok && top(rel) == "cmd" && top(p.ImportPath) != "cmd" {
				t.Errorf("a test of %s imports %s: tests below cmd/ do not use the CLI", p.ImportPath, rel)
			}
		}
	}
}

// The rule itself: each clause rejects what DESIGN.md §1 forbids and admits what it allows.
func TestViolation(t *testing.T) {
	for _, c := range []struct {
		from, to string
		ok       bool
	}{
		{"cmd/mempo", "stages/eval", true},
		{"stages/update", "train", true},
		{"stages/update", "stages/advantage", false},
		{"train", "model/qwen2", true},
		{"model/qwen2", "train", false},
		{"agent/search", "model/bpe", false},
		{"model/qwen2", "model/torch", true},
		{"model/qwen2", "jobs", false},
		{"model/qwen2", "format", true},
		{"model/bpe", "format", true},
		{"train", "jobs", true},
		{"jobs", "format", true},
		{"format", "jobs", false},
		{"jobs", "internal/renameio", true},
		{"internal/renameio", "format", false},
		{"stages/score", "format/formattest", false},
		{"cmd/mempo", "cmd/internal/app/apptest", false},
		{"format", "stages/score", false},
		{"stages/rollout", "cmd/internal/app", false},
		{"tools", "format", false},
		{"cmd/mempo", "audit", true},
		{"audit", "format", true},
		{"audit", "model/bpe", true},
		{"audit", "stages/eval", false},
		{"stages/eval", "audit", false},
		{"format", "audit", false},
		{"model/serve", "model/engine", true},
		{"model/engine", "model/qwen2", true},
		{"model/qwen2", "model/engine", false},
		{"model/engine", "model/serve", false},
		{"model/torch", "model/serve", false},
		{"stages/index", "agent/search", true},
		{"stages/index", "jobs", true},
		{"agent/search", "jobs", false},
		{"agent/search", "format", true},
	} {
		if got := violation(c.from, c.to) == ""; got != c.ok {
			t.Errorf("%s → %s allowed = %v, want %v (%q)", c.from, c.to, got, c.ok, violation(c.from, c.to))
		}
	}
}
