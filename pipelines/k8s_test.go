package pipelines

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
)

// k8sValidator builds build/k8s's validator (kubeconform over schemas converted from
// pinned modules) and returns its path, or skips the test in one line where the Go
// module proxy cannot be reached.
func k8sValidator(t *testing.T) string {
	t.Helper()
	mod := filepath.Join("..", "build", "k8s")
	env := append(os.Environ(), "CGO_ENABLED=0")
	dl := exec.Command("go", "mod", "download")
	dl.Dir, dl.Env = mod, env
	if out, err := dl.CombinedOutput(); err != nil {
		t.Skipf("Go module proxy unreachable (go mod download in build/k8s: %v: %s): manifests not validated", err, firstLine(out))
	}
	bin := filepath.Join(t.TempDir(), "k8svalidate")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Dir, build.Env = mod, env
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build build/k8s: %v\n%s", err, out)
	}
	return bin
}

func firstLine(b []byte) string {
	s, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	return s
}

// runValidator validates the files (or, for "-", stdin) and returns its exit status and
// output; an unreachable module proxy (status 3) skips the test.
func runValidator(t *testing.T, bin, stdin string, files ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(bin, files...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	if code == 3 {
		t.Skipf("Go module proxy unreachable for the schemas: %s", firstLine(out))
	}
	return code, string(out)
}

// manifestFiles is every Kubernetes manifest of scaleout/, not kustomize's own files.
func manifestFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("scaleout/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range files {
		if !strings.HasPrefix(filepath.Base(f), "kustomiz") {
			out = append(out, f)
		}
	}
	if len(out) < 8 {
		t.Fatalf("scaleout/ has %d manifests: %q", len(out), out)
	}
	return out
}

// TestK8sManifests validates every manifest of scaleout/ and kustomize's rendering of
// them against the Kubernetes API's schemas (v1.36) and the CRDs of the custom kinds
// (Argo's Workflow, Kubeflow's PyTorchJob), strictly: an unknown field or a value of the
// wrong type fails. The cases below prove it does, on each kind.
func TestK8sManifests(t *testing.T) {
	bin := k8sValidator(t)
	files := manifestFiles(t)
	code, out := runValidator(t, bin, "", files...)
	if code != 0 {
		t.Fatalf("k8svalidate %s: exit %d\n%s", strings.Join(files, " "), code, out)
	}
	for _, kind := range []string{"Deployment apps/v1", "Service v1", "Job batch/v1", "Workflow argoproj.io/v1alpha1",
		"PyTorchJob kubeflow.org/v1", "Role rbac.authorization.k8s.io/v1"} {
		if !strings.Contains(out, "valid   scaleout/") || !strings.Contains(out, ": "+kind+"/") {
			t.Errorf("no %s validated:\n%s", kind, out)
		}
	}

	if _, err := exec.LookPath("kubectl"); err != nil {
		t.Log("kubectl not found: kustomize's rendering not checked")
	} else {
		rendered, err := exec.Command("kubectl", "kustomize", "scaleout").Output()
		if err != nil {
			t.Fatalf("kubectl kustomize scaleout: %v", err)
		}
		if code, out := runValidator(t, bin, string(rendered), "-"); code != 0 {
			t.Errorf("kubectl kustomize scaleout | k8svalidate -: exit %d\n%s", code, out)
		}
		images := regexp.MustCompile(`(?m)^\s*image: (\S+)`).FindAllStringSubmatch(string(rendered), -1)
		named := 0
		for _, m := range images {
			if m[1] == "mempo" {
				t.Errorf("kustomize left an image unnamed (%q): kustomizeconfig.yaml misses its field", m[1])
			}
			if strings.HasPrefix(m[1], "registry.example.com/mempo:") {
				named++
			}
		}
		if named < 10 {
			t.Errorf("kustomize named %d mempo images, want every mempo container's:\n%s", named, rendered)
		}
	}

	mutate := func(file, old, new string) string {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(data), old) {
			t.Fatalf("%s has no %q to change", file, old)
		}
		return strings.Replace(string(data), old, new, 1)
	}
	for _, c := range []struct {
		name, file, old, new, want string
	}{
		{"misspelled field in a Deployment", "scaleout/retriever.yaml", "readinessProbe:", "readinesProbe:", "'readinesProbe' not allowed"},
		{"misspelled field in a Service", "scaleout/retriever.yaml", "selector: {app: retriever}\n  ports", "selectr: {app: retriever}\n  ports", "'selectr' not allowed"},
		{"wrong type in a Job", "scaleout/rollout-indexed-job.yaml", "completions: 8", "completions: eight", "/spec/completions"},
		{"misspelled field in a Workflow", "scaleout/rollout-workflow.yaml", "retryStrategy: {limit: 16", "retryStrategy: {limt: 16", "'limt' not allowed"},
		{"wrong type in a Workflow's container", "scaleout/rollout-workflow.yaml", `command: ["mempo-rollout"]`, `command: "mempo-rollout"`, "want array"},
		{"wrong type in a PyTorchJob", "scaleout/update-pytorchjob.yaml", "replicas: 1", "replicas: one", "want integer"},
		{"misspelled field in a PyTorchJob's pod", "scaleout/update-pytorchjob.yaml", "volumeMounts:", "volumeMount:", "'volumeMount' not allowed"},
		{"a quantity that is none", "scaleout/rollout-workflow.yaml", "nvidia.com/gpu: 1}", "nvidia.com/gpu: one}", "limits/nvidia.com~1gpu"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, out := runValidator(t, bin, mutate(c.file, c.old, c.new), "-")
			if code != 1 || !strings.Contains(out, "INVALID") || !strings.Contains(out, c.want) {
				t.Errorf("%s with %q for %q: exit %d, want 1 naming %q:\n%s", c.file, c.new, c.old, code, c.want, out)
			}
		})
	}
	if code, out := runValidator(t, bin, "apiVersion: example.com/v1\nkind: Unknown\nmetadata: {name: x}\n", "-"); code != 1 {
		t.Errorf("a kind without a schema: exit %d, want 1:\n%s", code, out)
	}
}

// dockerfile is what the tests read of the Dockerfile: its instructions with
// continuation lines joined.
func dockerfile(t *testing.T) []string {
	t.Helper()
	f, err := os.Open("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	cur := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if cur == "" && (line == "" || strings.HasPrefix(line, "#")) {
			continue
		}
		if strings.HasSuffix(line, `\`) {
			cur += strings.TrimSuffix(line, `\`) + " "
			continue
		}
		out = append(out, cur+line)
		cur = ""
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// ignored reports whether .dockerignore keeps path (relative to the repo root) out of
// the build context: a pattern matches the path or a directory above it, and **/
// matches at any depth.
func ignored(patterns []string, path string) bool {
	parts := strings.Split(path, "/")
	for _, p := range patterns {
		for i := 1; i <= len(parts); i++ {
			prefix := strings.Join(parts[:i], "/")
			if ok, _ := filepath.Match(p, prefix); ok {
				return true
			}
			if rest, ok := strings.CutPrefix(p, "**/"); ok {
				for j := 0; j < i; j++ {
					if ok, _ := filepath.Match(rest, strings.Join(parts[j:i], "/")); ok {
						return true
					}
				}
			}
		}
	}
	return false
}

// TestDockerfile checks offline what an engine would find out: every COPY from the
// context exists and is not left out by .dockerignore, while the context leaves out
// bin/ and runs/; the Go image is go.mod's Go; the build sets the libtorch cache the
// runtime copies from at the version build/libtorch.sh pins; the binaries the image
// copies are those cmd/ builds; and the libtorch libraries it copies are exactly those
// the built binaries load from libtorch (ldd).
func TestDockerfile(t *testing.T) {
	lines := dockerfile(t)
	data, err := os.ReadFile("../.dockerignore")
	if err != nil {
		t.Fatal(err)
	}
	var patterns []string
	for _, l := range strings.Split(string(data), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			patterns = append(patterns, strings.TrimSuffix(l, "/"))
		}
	}
	for _, p := range []string{"bin/mempo", "runs/demo", ".git/HEAD", "cmd/mempo/main_test.go"} {
		if !ignored(patterns, p) {
			t.Errorf(".dockerignore sends %s to the build context", p)
		}
	}
	for _, p := range []string{"go.mod", "Makefile", "build/libtorch.sh", "cmd/mempo/main.go", "view/static"} {
		if ignored(patterns, p) {
			t.Errorf(".dockerignore leaves out %s, which the build needs", p)
		}
	}

	var binaries, libs []string
	libDir := ""
	for _, l := range lines {
		f := strings.Fields(l)
		switch {
		case f[0] == "COPY" && !strings.HasPrefix(f[1], "--from="):
			args := slices.DeleteFunc(f[1:], func(s string) bool { return strings.HasPrefix(s, "--") })
			for _, src := range args[:len(args)-1] {
				src = strings.TrimSuffix(src, "/")
				if _, err := os.Stat(filepath.Join("..", src)); err != nil {
					t.Errorf("Dockerfile: %q: %v", l, err)
				} else if src != "." && ignored(patterns, src) {
					t.Errorf("Dockerfile: %q copies %s, which .dockerignore leaves out", l, src)
				}
			}
		case f[0] == "COPY" && f[1] == "--from=build":
			dst := f[len(f)-1]
			for _, src := range f[2 : len(f)-1] {
				switch {
				case strings.HasPrefix(src, "/src/bin/") && dst == "/usr/local/bin/":
					binaries = append(binaries, filepath.Base(src))
				case filepath.Dir(src)+"/" == dst:
					libs = append(libs, filepath.Base(src))
					libDir = filepath.Dir(src)
				default:
					t.Errorf("Dockerfile: %q: %s is neither a binary copied to /usr/local/bin/ nor a library kept at its path", l, src)
				}
			}
		}
	}
	mod, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	goVersion := regexp.MustCompile(`(?m)^go (\S+)`).FindSubmatch(mod)
	if goVersion == nil || !slices.Contains(lines, "ARG GO_VERSION="+string(goVersion[1])) {
		t.Errorf("Dockerfile: no ARG GO_VERSION=%s (go.mod's go line)", goVersion[1])
	}
	script, err := os.ReadFile("../build/libtorch.sh")
	if err != nil {
		t.Fatal(err)
	}
	pinned := regexp.MustCompile(`VERSION=\$\{LIBTORCH_VERSION:-([0-9.]+)\}`).FindSubmatch(script)
	if pinned == nil {
		t.Fatal("build/libtorch.sh: no default LIBTORCH_VERSION")
	}
	if want := "/opt/mempo/libtorch-" + string(pinned[1]) + "/lib"; libDir != want {
		t.Errorf("Dockerfile copies libtorch from %q, want %s (MEMPO_CACHE=/opt/mempo and build/libtorch.sh's %s)", libDir, want, pinned[1])
	}
	if !slices.ContainsFunc(lines, func(l string) bool { return strings.HasPrefix(l, "ENV MEMPO_CACHE=/opt/mempo ") }) {
		t.Error("Dockerfile: the build stage does not set MEMPO_CACHE=/opt/mempo, where the runtime copies libtorch from")
	}

	mains, err := filepath.Glob("../cmd/*/main.go")
	if err != nil {
		t.Fatal(err)
	}
	var cmds []string
	for _, m := range mains {
		cmds = append(cmds, filepath.Base(filepath.Dir(m)))
	}
	sort.Strings(cmds)
	sort.Strings(binaries)
	if !slices.Equal(binaries, cmds) {
		t.Errorf("the image copies the binaries %q, cmd/ builds %q", binaries, cmds)
	}

	// What the binaries load from libtorch, built as make build builds them (build/go.sh
	// exports the LIBTORCH it builds against).
	libtorch := os.Getenv("LIBTORCH")
	if libtorch == "" || os.Getenv("CGO_ENABLED") == "0" {
		t.Skip("no libtorch here (LIBTORCH unset or cgo off: not under build/go.sh): libraries not compared with ldd")
	}
	if filepath.Base(libtorch) != "libtorch-"+string(pinned[1]) {
		t.Skipf("built against LIBTORCH=%q, not the pinned libtorch the image copies: libraries not compared with ldd", libtorch)
	}
	bin := buildBinaries(t, t.TempDir())
	needed := map[string]bool{}
	for _, name := range cmds {
		out, err := exec.Command("ldd", filepath.Join(bin, name)).CombinedOutput()
		if err != nil {
			t.Fatalf("ldd %s: %v\n%s", name, err, out)
		}
		for _, m := range regexp.MustCompile(`(?m)^\s*(\S+) => (\S+)`).FindAllStringSubmatch(string(out), -1) {
			if m[2] == "not" {
				t.Errorf("ldd %s: %s not found", name, m[1])
			}
			if strings.HasPrefix(m[2], libtorch+"/lib/") {
				needed[m[1]] = true
			}
		}
	}
	var want []string
	for l := range needed {
		want = append(want, l)
	}
	sort.Strings(want)
	sort.Strings(libs)
	if len(want) == 0 || !slices.Equal(libs, want) {
		t.Errorf("the image copies the libtorch libraries %q; the binaries load %q from libtorch", libs, want)
	}
}

// TestImage builds the image with make image and runs it: mempo --version, then one
// real run of the stages on a tiny task (gen-task, index, init-model and a rollout,
// which loads libtorch). Where no container engine answers it says so in one line.
func TestImage(t *testing.T) {
	docker := os.Getenv("DOCKER")
	if docker == "" {
		docker = "docker"
	}
	if _, err := exec.LookPath(docker); err != nil {
		t.Skipf("no container engine (%s not found): image not built", docker)
	}
	if out, err := exec.Command(docker, "info").CombinedOutput(); err != nil {
		t.Skipf("no container engine answers (%s info: %s): image not built", docker, lastLine(out))
	}
	image := "mempo-test:" + strings.ToLower(t.Name())
	mk := exec.Command("make", "--no-print-directory", "-C", "..", "image", "IMAGE="+image, "DOCKER="+docker)
	if out, err := mk.CombinedOutput(); err != nil {
		t.Fatalf("make image: %v\n%s", err, out)
	}
	defer exec.Command(docker, "rmi", "-f", image).Run()
	out, err := exec.Command(docker, "run", "--rm", image, "mempo", "--version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "libtorch") {
		t.Fatalf("%s run %s mempo --version: %v\n%s", docker, image, err, out)
	}
	t.Logf("mempo --version in the image:\n%s", out)
	protocol, err := filepath.Abs("demo-protocol.json")
	if err != nil {
		t.Fatal(err)
	}
	script := `set -e; cd /tmp
mempo gen-task --seed 1 --out task --progress none --log-level warn --people 40 --cities 12 --companies 12 --countries 4 --train 24 --test 2 --test-k 2,4
mempo index --corpus task/corpus.jsonl --out index
mempo init-model --corpus task/corpus.jsonl --prompts task/prompts-train --seed 1 --protocol /protocol.json --vocab 600 --out init
mempo-rollout --prompts task/prompts-train --policy init --index index --out rollouts --n 2 --max-turns 3 --max-new-tokens 16 --threads 1 --prompt-limit 3 --protocol /protocol.json --progress none --log-level warn
test -f rollouts/_manifest.json`
	run := exec.Command(docker, "run", "--rm", "-v", protocol+":/protocol.json:ro", image, "sh", "-c", script)
	if out, err := run.CombinedOutput(); err != nil {
		t.Fatalf("stages in %s: %v\n%s", image, err, out)
	}
}

func lastLine(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}
