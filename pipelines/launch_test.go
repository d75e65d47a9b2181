//go:build cgo

// The launcher test compares the ranks' checkpoint with one process's through the
// tensor code, so it builds only where cgo does (make test-torch).

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

	"github.com/mempo/mempo/format"
	"github.com/mempo/mempo/model/qwen2/qwen2test"
)

// rendezvous is what each launcher must hand the ranks: the variables mempo-update
// joins (train/collective.FromEnv).
var rendezvous = []string{"MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK"}

// flagsIn is every --flag a recipe's text names.
func flagsIn(text string) []string {
	var out []string
	for _, m := range regexp.MustCompile(`(?m)(?:^|[\s"'(=])--([a-z][a-z0-9-]+)`).FindAllStringSubmatch(text, -1) {
		out = append(out, m[1])
	}
	return out
}

// TestUpdateLaunchers checks the recipes that start a data-parallel update against
// the binaries: the PyTorchJob's Master and Worker run mempo-update with the same flags,
// each a flag the binaries define, and --world-size equal to its replicas; the Slurm
// script and the torchrun script parse, pass only flags that exist, and hand every rank
// the rendezvous variables; LAUNCH puts the launcher before every update of the DAG.
func TestUpdateLaunchers(t *testing.T) {
	known := cmdFlags(t)
	job := "scaleout/update-pytorchjob.yaml"
	args := containerArgs(t, job)
	if len(args) != 2 || !slicesEqual(args[0], args[1]) || args[0][0] != "mempo-update" {
		t.Fatalf("%s: containers %q, want Master and Worker running mempo-update alike", job, args)
	}
	data, _ := os.ReadFile(job)
	replicas := 0
	for _, m := range regexp.MustCompile(`replicas:\s*(\d+)`).FindAllStringSubmatch(string(data), -1) {
		n, _ := strconv.Atoi(m[1])
		replicas += n
	}
	if !slicesContain(args[0], "--world-size="+strconv.Itoa(replicas)) {
		t.Errorf("%s: args %q lack --world-size=%d, its replicas", job, args[0], replicas)
	}
	for _, a := range args[0][1:] {
		if name := strings.TrimPrefix(strings.SplitN(a, "=", 2)[0], "--"); !known[name] {
			t.Errorf("%s: --%s is no flag of the binaries", job, name)
		}
	}
	for _, script := range []string{"scaleout/update-2node.slurm", "scaleout/update-torchrun.sh"} {
		cmd := scriptBody(t, script)
		for _, name := range flagsIn(cmd) {
			if !known[name] && !launcherFlag[name] {
				t.Errorf("%s: --%s is no flag of the binaries nor of the launcher", script, name)
			}
		}
		if !strings.Contains(cmd, "--world-size") {
			t.Errorf("%s: the update is not told its --world-size", script)
		}
	}
	slurm, _ := os.ReadFile("scaleout/update-2node.slurm")
	for _, v := range rendezvous {
		if !regexp.MustCompile(`\b`+v+`\b=`).Match(slurm) && !strings.Contains(string(slurm), "export "+v) && !strings.Contains(string(slurm), " "+v+"\n") {
			t.Errorf("update-2node.slurm does not set %s for the ranks", v)
		}
	}
	bin := t.TempDir()
	if err := os.WriteFile(filepath.Join(bin, "CODE_VERSION"), []byte("test\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("make", "-n", "--no-print-directory", "-f", "mempo.mk", "train", "RUN_DIR=/r", "BIN="+bin, "ITERS=1",
		"VARIANTS=mempo", "LAUNCH=torchrun --nproc-per-node 2 --no-python").CombinedOutput()
	if err != nil {
		t.Fatalf("make -n: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "torchrun --nproc-per-node 2 --no-python "+bin+"/mempo-update ") {
		t.Errorf("make -n with LAUNCH runs no update through the launcher:\n%s", out)
	}
}

// launcherFlag names the flags of torchrun and srun the scripts pass.
var launcherFlag = map[string]bool{"nnodes": true, "nproc-per-node": true, "node-rank": true, "master-addr": true,
	"master-port": true, "no-python": true, "kill-on-bad-exit": true, "rdzv-backend": true, "rdzv-endpoint": true}

func slicesEqual(a, b []string) bool { return strings.Join(a, "\x00") == strings.Join(b, "\x00") }

func slicesContain(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// TestTorchrunUpdate runs scaleout/update-torchrun.sh as written, with torchrun from a
// Python that has torch, on a tiny run's first iteration: two ranks on loopback write
// the checkpoint one process writes, to float32 rounding, keyed by --world-size 2.
func TestTorchrunUpdate(t *testing.T) {
	py := torchPython()
	if py == "" || exec.Command(py, "-c", "import torch.distributed.run").Run() != nil {
		t.Skip("no Python with torch (MEMPO_TEST_PYTHON, or make bench-compare's environment): torchrun is not here")
	}
	dir := t.TempDir()
	bin := buildBinaries(t, dir)
	// torchrun as a command, whichever way the environment installed it.
	shim := filepath.Join(dir, "shim")
	if err := os.MkdirAll(shim, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(shim, "torchrun"), []byte("#!/bin/sh\nexec "+py+" -m torch.distributed.run \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	run := filepath.Join(dir, "run")
	// Small passes, so that each mini-batch has micro-batches for both ranks.
	flags := "--lr 1e-3 --mini-batches 2 --micro-token-budget 200 --threads 1 --kl-coef 0.1 --entropy-coef 0.01"
	mk := exec.Command("make", append([]string{"--no-print-directory", "-j2", "-f", "mempo.mk", "train", "BIN=" + bin, "RUN_DIR=" + run,
		"ITERS=1", "VARIANTS=mempo", "PROMPTS_PER_ITER=4", "DTYPE=float32", "UPDATE_FLAGS=" + flags},
		tinyExcept("ITERS", "VARIANTS", "PROMPTS_PER_ITER", "DTYPE", "UPDATE_FLAGS")...)...)
	if out, err := mk.CombinedOutput(); err != nil {
		t.Fatalf("make: %v\n%s", err, out)
	}
	cmd := exec.Command("bash", append([]string{"scaleout/update-torchrun.sh"}, strings.Fields(flags)...)...)
	cmd.Env = append(os.Environ(), "PATH="+shim+":"+os.Getenv("PATH"), "RUN="+run, "BIN="+bin, "NPROC=2", "MASTER_PORT="+strconv.Itoa(freePort(t)))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("update-torchrun.sh: %v\n%s", err, out)
	}
	ranks := filepath.Join(run, "mempo", "iter-1", "policy-ranks")
	st, err := format.ReadTrainerState(ranks)
	if err != nil {
		t.Fatal(err)
	}
	var conf struct {
		WorldSize int `json:"world_size"`
	}
	if err := json.Unmarshal(st.Config, &conf); err != nil || conf.WorldSize != 2 {
		t.Errorf("trainer_state.json config world_size = %d (%v), want 2", conf.WorldSize, err)
	}
	one := filepath.Join(run, "mempo", "iter-1", "policy")
	d := qwen2test.ChangeDiff(t, filepath.Join(run, "sft"), ranks, one)
	t.Logf("two torchrun ranks: the weights' change differs from one process's by %.3g relative", d)
	if !(d <= 1e-5) {
		t.Errorf("two torchrun ranks' weights' change differs from one process's by %.3g relative, want <= 1e-5", d)
	}
}

// freePort is a TCP port nothing listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// containerChunks splits a manifest into its containers' text, each from its command
// line to the next container's or the document's end: every manifest here writes a
// container's command first, its args and resources after.
func containerChunks(t *testing.T, file string) []string {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var chunks []string
	in := false
	for _, line := range strings.Split(string(data), "\n") {
		switch {
		case regexp.MustCompile(`^\s*command:\s*\[`).MatchString(line):
			chunks = append(chunks, "")
			in = true
		case line == "---":
			in = false
		}
		if in {
			chunks[len(chunks)-1] += line + "\n"
		}
	}
	return chunks
}

// TestK8sLaunchers checks the Kubernetes manifests' wiring against the binaries: every
// flag a mempo container passes exists; the retriever's Service is what every
// rollout's --retriever-url names, on the port serve-retriever listens on; the
// workflows' workers and merge run the Indexed Jobs' commands (--shard i/8 for
// --shard-count 8), so the two set-ups cannot drift apart; and a mempo container
// requests a GPU exactly where it passes --device=cuda and runs a model (a --merge runs
// none: it passes the workers' --device, part of the key, and needs no GPU).
func TestK8sLaunchers(t *testing.T) {
	known := cmdFlags(t)
	files := manifestFiles(t)
	urls := 0
	for _, file := range files {
		cmds := containerArgs(t, file)
		chunks := containerChunks(t, file)
		if len(chunks) != len(cmds) {
			t.Fatalf("%s: %d container chunks for %d commands", file, len(chunks), len(cmds))
		}
		for i, c := range cmds {
			if !strings.HasPrefix(c[0], "mempo") {
				continue
			}
			cuda, merge := false, false
			for _, a := range c[1:] {
				name, value, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
				if !strings.HasPrefix(a, "--") {
					continue
				}
				if !known[name] {
					t.Errorf("%s: %s passes %s: no binary under cmd/ defines --%s", file, c[0], a, name)
				}
				if name == "device" && strings.HasPrefix(value, "cuda") {
					cuda = true
				}
				merge = merge || name == "merge"
				if name == "retriever-url" {
					urls++
					if value != "http://retriever:8000" {
						t.Errorf("%s: %s --retriever-url=%s, want retriever.yaml's Service http://retriever:8000", file, c[0], value)
					}
				}
			}
			gpu := regexp.MustCompile(`nvidia\.com/gpu:\s*[1-9]`).MatchString(chunks[i])
			if cuda && !merge != gpu {
				t.Errorf("%s: container %d (%s) runs a model on --device=cuda: %v, requests nvidia.com/gpu: %v; want both or neither",
					file, i, strings.Join(c, " "), cuda && !merge, gpu)
			}
		}
	}
	if urls < 8 {
		t.Errorf("%d rollout containers name a --retriever-url, want every worker's and merge's", urls)
	}

	// The retriever: Service "retriever" port 8000 onto the pods serve-retriever listens in.
	r := containerArgs(t, "scaleout/retriever.yaml")
	if len(r) != 1 || strings.Join(r[0][:2], " ") != "mempo serve-retriever" || !slicesContain(r[0], "--addr=0.0.0.0:8000") {
		t.Fatalf("retriever.yaml: containers %q, want one mempo serve-retriever --addr=0.0.0.0:8000", r)
	}
	data, _ := os.ReadFile("scaleout/retriever.yaml")
	for _, want := range []string{"kind: Service\nmetadata:\n  name: retriever\n", "selector: {app: retriever}", "port: 8000, targetPort: 8000", "containerPort: 8000"} {
		if !strings.Contains(string(data), want) {
			t.Errorf("retriever.yaml lacks %q", want)
		}
	}

	// The workflows run the Indexed Jobs' workers and merges.
	for wf, job := range map[string]string{"scaleout/rollout-workflow.yaml": "scaleout/rollout-indexed-job.yaml",
		"scaleout/rollout-server-workflow.yaml": "scaleout/rollout-server-indexed-job.yaml"} {
		w, j := containerArgs(t, wf), containerArgs(t, job)
		if len(w) != 2 || len(j) != 2 {
			t.Fatalf("%s, %s: %d and %d containers, want a worker and a merge each", wf, job, len(w), len(j))
		}
		worker := strings.Join(w[0], " ")
		if !strings.Contains(worker, "--shard={{inputs.parameters.part}}/8") {
			t.Errorf("%s: worker %q does not compute part {{inputs.parameters.part}} of 8", wf, worker)
		}
		if got, want := strings.Replace(worker, "--shard={{inputs.parameters.part}}/8", "--shard-count=8", 1), strings.Join(j[0], " "); got != want {
			t.Errorf("%s's worker runs\n  %s\n%s's runs\n  %s", wf, worker, job, want)
		}
		if !slicesEqual(w[1], j[1]) {
			t.Errorf("%s's merge runs %q, %s's %q", wf, w[1], job, j[1])
		}
		text, _ := os.ReadFile(wf)
		if !strings.Contains(string(text), `withSequence: {count: "8"}`) || !strings.Contains(string(text), "- - name: merge") {
			t.Errorf("%s: the merge is not a step after 8 workers", wf)
		}
	}
}

// scriptBody checks that the shell script parses (bash -n) and returns its commands:
// the text from its "set -euo pipefail" on, not the comments above it.
func scriptBody(t *testing.T, script string) string {
	t.Helper()
	if out, err := exec.Command("bash", "-n", script).CombinedOutput(); err != nil {
		t.Errorf("bash -n %s: %v\n%s", script, err, out)
	}
	data, err := os.ReadFile(script)
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	i := strings.Index(text, "\nset -euo pipefail")
	if i < 0 {
		t.Fatalf("%s: no set -euo pipefail", script)
	}
	return text[i:]
}
