package pipelines

import (
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// cmdFlags is every flag name the binaries under cmd/ define.
func cmdFlags(t *testing.T) map[string]bool {
	t.Helper()
	name := regexp.MustCompile(`Name:\s*"([a-z0-9-]+)"`)
	flags := map[string]bool{}
	err := filepath.WalkDir("../cmd", func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		src, err := os.ReadFile(path)
		for _, m := range name.FindAllSubmatch(src, -1) {
			flags[string(m[1])] = true
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return flags
}

// containerArgs returns, for each container of a Kubernetes manifest in order, its
// command line: the command list's words, then the flags of its args list.
func containerArgs(t *testing.T, file string) [][]string {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	command := regexp.MustCompile(`^\s*command:\s*\[(.*)\]`)
	arg := regexp.MustCompile(`^\s*-\s+(\S+)`)
	var out [][]string
	in := false
	for _, line := range strings.Split(string(data), "\n") {
		if m := command.FindStringSubmatch(line); m != nil {
			var words []string
			for _, w := range strings.Split(m[1], ",") {
				words = append(words, strings.Trim(strings.TrimSpace(w), `"`))
			}
			out = append(out, words)
			continue
		}
		switch {
		case strings.TrimSpace(line) == "args:":
			in = len(out) > 0
		case in && arg.MatchString(line):
			out[len(out)-1] = append(out[len(out)-1], arg.FindStringSubmatch(line)[1])
		case in:
			in = false
		}
	}
	return out
}

// TestServerExamples checks the policy-server examples against the binaries: every
// flag a mempo container passes exists, the rollout workers use the server engine
// at the Service both servers define, the vLLM server keeps the flags the README
// names for reproducible log-probs, and the loopback script parses.
func TestServerExamples(t *testing.T) {
	flags := cmdFlags(t)
	files := map[string]int{ // containers each file defines
		"scaleout/policy-server-vllm.yaml":         1,
		"scaleout/policy-server-mempo.yaml":        1,
		"scaleout/rollout-server-indexed-job.yaml": 2,
		"scaleout/rollout-indexed-job.yaml":        2,
	}
	for file, containers := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			cmds := containerArgs(t, file)
			if len(cmds) != containers {
				t.Fatalf("%d containers with a command, want %d: %q", len(cmds), containers, cmds)
			}
			for _, c := range cmds {
				if !strings.HasPrefix(c[0], "mempo") {
					continue
				}
				for _, a := range c[1:] {
					name, _, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
					if strings.HasPrefix(a, "--") && !flags[name] {
						t.Errorf("%s passes %s: no binary under cmd/ defines --%s", c[0], a, name)
					}
				}
			}
		})
	}
	for _, c := range containerArgs(t, "scaleout/rollout-server-indexed-job.yaml") {
		line := strings.Join(c, " ")
		for _, want := range []string{"--engine=server", "--engine-url=http://policy:8000", "--engine-model=policy-iter-1"} {
			if !strings.Contains(line, want) {
				t.Errorf("rollout worker %q lacks %s", line, want)
			}
		}
	}
	for _, file := range []string{"scaleout/policy-server-vllm.yaml", "scaleout/policy-server-mempo.yaml"} {
		data, _ := os.ReadFile(file)
		for _, want := range []string{"name: policy\n", "--served-model-name=policy-iter-1", "port: 8000"} {
			if !strings.Contains(string(data), want) {
				t.Errorf("%s lacks %q", file, want)
			}
		}
	}
	vllm := strings.Join(containerArgs(t, "scaleout/policy-server-vllm.yaml")[0], " ")
	for _, want := range []string{"vllm serve", "--generation-config=vllm", "--logprobs-mode=processed_logprobs", "--seed=0",
		"--dtype=", "--no-enable-prefix-caching", "--max-model-len="} {
		if !strings.Contains(vllm, want) {
			t.Errorf("vLLM server %q lacks %s", vllm, want)
		}
	}
	if out, err := exec.Command("bash", "-n", "scaleout/rollout-loopback.sh").CombinedOutput(); err != nil {
		t.Errorf("bash -n rollout-loopback.sh: %v\n%s", err, out)
	}
}

// TestRolloutLoopback runs pipelines/serve.mk with the real binaries: one
// serve-policy on loopback (one sequence at a time) and two rollout shards against
// it, merged. The dataset's outputs equal an unsharded in-process run's, shard for
// shard and digest for digest.
func TestRolloutLoopback(t *testing.T) {
	dir := t.TempDir()
	bin := buildBinaries(t, dir)
	run := func(name string, args ...string) {
		t.Helper()
		if out, err := exec.Command(filepath.Join(bin, name), args...).CombinedOutput(); err != nil {
			t.Fatalf("%s %q: %v\n%s", name, args, err, out)
		}
	}
	task, index, policy := filepath.Join(dir, "task"), filepath.Join(dir, "index"), filepath.Join(dir, "init")
	run("mempo", append([]string{"gen-task", "--seed", "1", "--out", task, "--progress", "none", "--log-level", "warn"},
		strings.Fields("--people 40 --cities 12 --companies 12 --countries 4 --train 24 --test 2 --test-k 2,4")...)...)
	run("mempo", "index", "--corpus", filepath.Join(task, "corpus.jsonl"), "--out", index)
	run("mempo", "init-model", "--corpus", filepath.Join(task, "corpus.jsonl"), "--prompts", filepath.Join(task, "prompts-train"),
		"--seed", "1", "--protocol", "demo-protocol.json", "--vocab", "600", "--out", policy)
	flags := "--n 2 --max-turns 3 --max-new-tokens 16 --threads 1 --prompt-limit 3 --prompts-per-shard 1 --seed 5 " +
		"--protocol demo-protocol.json --progress none --log-level warn"
	local := filepath.Join(dir, "local")
	run("mempo-rollout", append([]string{"--prompts", filepath.Join(task, "prompts-train"), "--policy", policy, "--index", index,
		"--max-batch", "1", "--out", local}, strings.Fields(flags)...)...)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	served := filepath.Join(dir, "served")
	mk := exec.Command("make", "--no-print-directory", "-f", "serve.mk", "BIN="+bin, "SHARDS=2", "PORT="+port,
		"POLICY="+policy, "PROMPTS="+filepath.Join(task, "prompts-train"), "INDEX="+index, "OUT="+served,
		"SERVE_FLAGS=--max-batch=1", "ROLLOUT_FLAGS="+flags)
	if out, err := mk.CombinedOutput(); err != nil {
		t.Fatalf("make -f serve.mk: %v\n%s", err, out)
	}
	if got, want := outputs(t, served), outputs(t, local); len(want) < 2 || !cmp.Equal(got, want) {
		t.Errorf("served rollouts' outputs differ from the in-process run's (-local +served):\n%s", cmp.Diff(want, got))
	}
	if got := manifest(t, served).Config.Engine; got != "server" {
		t.Errorf("served rollouts' manifest config has engine %q, want server", got)
	}
}

// rolloutManifest is what the test reads of a rollout dataset's manifest.
type rolloutManifest struct {
	Config struct {
		Engine string `json:"engine"`
	} `json:"config"`
	// Outputs lists file, sha256, bytes and rows of every shard.
	Outputs []map[string]any `json:"outputs"`
}

func manifest(t *testing.T, dir string) rolloutManifest {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "_manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m rolloutManifest
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatalf("%s/_manifest.json: %v", dir, err)
	}
	return m
}

// outputs is the output list of a dataset's manifest.
func outputs(t *testing.T, dir string) []map[string]any { return manifest(t, dir).Outputs }
