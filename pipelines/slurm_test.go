//go:build cgo

// The Slurm test runs the tensor binaries as batch jobs and compares the update's
// weights through the tensor code, so it builds only where cgo does (make test-torch).

package pipelines

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mempo/mempo/format"
	"github.com/mempo/mempo/model/qwen2/qwen2test"
	"github.com/mempo/mempo/train/collective"
)

// slurmScripts are the batch scripts iteration-submit.sh submits.
var slurmScripts = []string{"scaleout/rollout-array.slurm", "scaleout/cpu-stage.slurm", "scaleout/logprob.slurm", "scaleout/update-2node.slurm"}

// sbatchFlag names the flags of sbatch and srun the Slurm recipes pass.
var sbatchFlag = map[string]bool{"parsable": true, "export": true, "dependency": true, "kill-on-invalid-dep": true,
	"array": true, "job-name": true, "output": true, "kill-on-bad-exit": true}

// directives is a batch script's #SBATCH options: name to value ("" for a bare flag).
func directives(text string) map[string]string {
	out := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^#SBATCH\s+--([a-z-]+)(?:=(\S+))?`).FindAllStringSubmatch(text, -1) {
		out[m[1]] = m[2]
	}
	return out
}

// TestSlurmRecipes checks the Slurm recipes without a cluster: they parse, pass only
// flags the binaries, sbatch or srun define, the array task submits nothing itself, the
// merge is one task without a GPU, and every job after the array waits for the ones
// before it. TestSlurmIteration runs them.
func TestSlurmRecipes(t *testing.T) {
	known := cmdFlags(t)
	for _, script := range append([]string{"scaleout/iteration-submit.sh"}, slurmScripts...) {
		cmd := scriptBody(t, script)
		for _, name := range flagsIn(cmd) {
			if !known[name] && !launcherFlag[name] && !sbatchFlag[name] {
				t.Errorf("%s: --%s is no flag of the binaries, sbatch nor srun", script, name)
			}
		}
	}
	array, _ := os.ReadFile("scaleout/rollout-array.slurm")
	cmd := scriptBody(t, "scaleout/rollout-array.slurm")
	if regexp.MustCompile(`(?m)(^|[;&|]|\$\()\s*sbatch\s`).MatchString(cmd) {
		t.Errorf("rollout-array.slurm submits a job itself; iteration-submit.sh submits the merge once")
	}
	if d := directives(string(array)); d["gres"] != "gpu:1" {
		t.Errorf("rollout-array.slurm: #SBATCH %v, want one GPU a task", d)
	}
	cpu, _ := os.ReadFile("scaleout/cpu-stage.slurm")
	if d := directives(string(cpu)); d["ntasks"] != "1" || d["gres"] != "" || d["gpus"] != "" || d["array"] != "" || d["nodes"] != "" && d["nodes"] != "1" {
		t.Errorf("cpu-stage.slurm: #SBATCH %v, want one task without a GPU", d)
	}
	submit, _ := os.ReadFile("scaleout/iteration-submit.sh")
	calls := regexp.MustCompile(`(?m)^submit (\w+) (\S+) ((?:.*\\\n)*.*)$`).FindAllStringSubmatch(string(submit), -1)
	var stages []string
	for i, c := range calls {
		stages = append(stages, c[1])
		if after := c[2]; (i == 0) != (after == `"${AFTER:-}"`) {
			t.Errorf("iteration-submit.sh: the %s job waits for %s", c[1], after)
		}
		if c[1] == "merge" && (!strings.Contains(c[3], "cpu-stage.slurm") || strings.Contains(c[3], "--array")) {
			t.Errorf("iteration-submit.sh: the merge is not one task of cpu-stage.slurm: %s", c[3])
		}
	}
	if want := []string{"rollout", "merge", "score", "logprob", "advantage", "update"}; !slices.Equal(stages, want) {
		t.Errorf("iteration-submit.sh submits %v, want %v", stages, want)
	}
}

// TestSlurmIteration runs scaleout/iteration-submit.sh as written on a Slurm cluster
// the test starts on this machine: slurmctld and two slurmd (nodes n0 and n1 on
// loopback, so the update really has 2 nodes) with munge, CPU-only, each node claiming
// 16 CPUs and 8 GPUs (links to /dev/null) so the scripts' #SBATCH requests fit. One
// tiny iteration (4 prompts, 4 array tasks of one prompt each) goes through the chain
// and through make (rl.mk, unsharded, one process): the merged rollouts' digest is
// make's, and so are the scores', log-probs' and advantages'; the 2-rank update's
// weights change as one process's does, to float32 rounding. The jobs' records show
// every job completed, the merge as one job with no GPU started after every array task
// ended, and each later step after the jobs it reads; their manifests name the merged
// rollouts by digest. Skips in one line without root, Slurm or munge (build/slurm.sh
// finds Slurm, or installs it as root with apt-get).
func TestSlurmIteration(t *testing.T) {
	start := time.Now()
	cl := startSlurm(t)
	t.Logf("the cluster started in %.1f s", time.Since(start).Seconds())
	if !collective.Available() {
		t.Skip("the binaries are built without c10d's Gloo backend (build/gloo.sh): the 2-node update cannot run")
	}
	dir := t.TempDir()
	start = time.Now()
	bin := buildBinaries(t, dir)
	run := filepath.Join(dir, "run")
	t.Logf("binaries built in %.1f s", time.Since(start).Seconds())
	start = time.Now()

	const shards, prompts = 4, 4
	rollFlags := tinyValue(t, "ROLLOUT_FLAGS") + " --prompts-per-shard 1" // a shard a prompt: every array task has one
	updFlags := "--lr 1e-3 --mini-batches 2 --micro-token-budget 200 --threads 1 --kl-coef 0.1 --entropy-coef 0.01"
	settings := []string{"ITERS=1", "VARIANTS=mempo", "PROMPTS_PER_ITER=" + strconv.Itoa(prompts), "DTYPE=float32",
		"ROLLOUT_FLAGS=" + rollFlags, "UPDATE_FLAGS=" + updFlags}
	mk := exec.Command("make", append(append([]string{"--no-print-directory", "-j2", "-f", "mempo.mk", "train", "BIN=" + bin, "RUN_DIR=" + run},
		settings...), tinyExcept("ITERS", "VARIANTS", "PROMPTS_PER_ITER", "DTYPE", "ROLLOUT_FLAGS", "UPDATE_FLAGS")...)...)
	if out, err := mk.CombinedOutput(); err != nil {
		t.Fatalf("make: %v\n%s", err, out)
	}
	want := filepath.Join(run, "mempo", "iter-1")
	t.Logf("make's iteration (task, index, SFT, one unsharded iteration) in %.1f s", time.Since(start).Seconds())
	start = time.Now()

	iter := filepath.Join(dir, "slurm-iter")
	submit := exec.Command("bash", "scaleout/iteration-submit.sh")
	submit.Env = append(cl.env, "RUN="+run, "ITER_DIR="+iter, "BIN="+bin, "SHARDS="+strconv.Itoa(shards),
		"PROMPTS_PER_ITER="+strconv.Itoa(prompts), "DEVICE=cpu", "PROTOCOL="+tinyValue(t, "PROTOCOL"),
		"ROLLOUT_FLAGS="+rollFlags, "LOGPROB_FLAGS="+tinyValue(t, "LOGPROB_FLAGS"), "UPDATE_FLAGS="+updFlags,
		"STAGE_FLAGS="+tinyValue(t, "STAGE_FLAGS"), "MASTER_PORT="+strconv.Itoa(freePort(t)))
	out, err := submit.Output()
	if err != nil {
		t.Fatalf("iteration-submit.sh: %v\n%s%s", err, out, stderrOf(err))
	}
	ids := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if f := strings.Fields(line); len(f) == 2 {
			ids[f[0]] = f[1]
		}
	}
	stages := []string{"rollout", "merge", "score", "logprob", "advantage", "update"}
	for _, s := range stages {
		if ids[s] == "" {
			t.Fatalf("iteration-submit.sh printed no %s job:\n%s", s, out)
		}
	}
	recs := cl.wait(t, 3*time.Minute, filepath.Join(iter, "slurm"))
	t.Logf("the Slurm chain ran in %.1f s", time.Since(start).Seconds())

	// The jobs' records: every job completed; the array ran SHARDS tasks with a GPU each,
	// the merge one task without; each step started once the steps it reads had ended.
	byStage := map[string][]map[string]string{}
	for _, r := range recs {
		for _, s := range stages {
			if r["JobId"] == ids[s] || s == "rollout" && r["ArrayJobId"] == ids[s] {
				byStage[s] = append(byStage[s], r)
			}
		}
		if r["JobState"] != "COMPLETED" {
			t.Errorf("job %s (%s) ended %s", r["JobId"], r["JobName"], r["JobState"])
		}
	}
	if t.Failed() {
		t.Fatalf("the chain failed; job outputs:\n%s", cl.outputs(filepath.Join(iter, "slurm")))
	}
	if n := len(byStage["rollout"]); n != shards {
		t.Errorf("rollout array: %d task records, want %d", n, shards)
	}
	for _, s := range stages[1:] {
		if len(byStage[s]) != 1 {
			t.Fatalf("%s: %d job records, want 1: %v", s, len(byStage[s]), byStage[s])
		}
	}
	for _, r := range byStage["rollout"] {
		if r["TresPerNode"] != "gres:gpu:1" {
			t.Errorf("rollout task %s: TresPerNode=%s, want one GPU", r["ArrayTaskId"], r["TresPerNode"])
		}
	}
	merge := byStage["merge"][0]
	if merge["ArrayJobId"] != "" || strings.Contains(merge["TresPerNode"]+merge["TRES"], "gpu") || merge["NumNodes"] != "1" || merge["NumTasks"] != "1" {
		t.Errorf("merge job: array %q, TresPerNode=%s TRES=%s, %s tasks on %s nodes; want one task, no GPU",
			merge["ArrayJobId"], merge["TresPerNode"], merge["TRES"], merge["NumTasks"], merge["NumNodes"])
	}
	if n := byStage["update"][0]["NumNodes"]; n != "2" {
		t.Errorf("update job ran on %s nodes, want 2", n)
	}
	after := map[string][]string{"merge": {"rollout"}, "score": {"merge"}, "logprob": {"merge"},
		"advantage": {"score", "logprob"}, "update": {"advantage"}}
	for s, before := range after {
		start := jobTime(t, byStage[s][0], "StartTime")
		for _, b := range before {
			for _, r := range byStage[b] {
				if end := jobTime(t, r, "EndTime"); start.Before(end) {
					t.Errorf("%s started at %s, before %s (job %s) ended at %s", s, start, b, r["JobId"], end)
				}
			}
		}
	}

	// The merged rollouts are the unsharded run's, built from SHARDS parts that each
	// hold rows; every later step read them.
	rolls := readManifest(t, filepath.Join(iter, "rollouts"))
	if d, w := rolls.Digest(), readManifest(t, filepath.Join(want, "rollouts")).Digest(); d != w {
		t.Errorf("merged rollouts digest %s, unsharded run's %s", d, w)
	}
	for i := range shards {
		part := filepath.Join(iter, "rollouts", "_parts", fmt.Sprintf("%d-of-%d", i, shards))
		if m := readManifest(t, part); m.Rows() == 0 {
			t.Errorf("%s holds no rows: the array did not shard the work", part)
		}
	}
	merged := format.Input{Name: "rollouts", Path: filepath.Join(iter, "rollouts"), Digest: "dataset:" + rolls.Digest()}
	for _, s := range []string{"scores", "logprobs", "advantages"} {
		m := readManifest(t, filepath.Join(iter, s))
		if !slices.Contains(m.Inputs, merged) {
			t.Errorf("%s: inputs %v, want the merged rollouts %v", s, m.Inputs, merged)
		}
		if d, w := m.Digest(), readManifest(t, filepath.Join(want, s)).Digest(); d != w {
			t.Errorf("%s digest %s, make's %s", s, d, w)
		}
	}
	ckpt, err := os.ReadFile(filepath.Join(iter, "policy", "checkpoint.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rec struct{ Inputs []format.Input }
	if err := json.Unmarshal(ckpt, &rec); err != nil || !slices.Contains(rec.Inputs, merged) {
		t.Errorf("update checkpoint inputs %v (%v), want the merged rollouts %v", rec.Inputs, err, merged)
	}
	st, err := format.ReadTrainerState(filepath.Join(iter, "policy"))
	if err != nil {
		t.Fatal(err)
	}
	var conf struct {
		WorldSize int `json:"world_size"`
	}
	if err := json.Unmarshal(st.Config, &conf); err != nil || conf.WorldSize != 2 {
		t.Errorf("update trainer_state.json config world_size = %d (%v), want 2", conf.WorldSize, err)
	}
	d := qwen2test.ChangeDiff(t, filepath.Join(run, "sft"), filepath.Join(iter, "policy"), filepath.Join(want, "policy"))
	t.Logf("the 2-node update's weights' change differs from make's one process's by %.3g relative", d)
	if !(d <= 1e-5) {
		t.Errorf("the 2-node update's weights' change differs from one process's by %.3g relative, want <= 1e-5", d)
	}
}

// tinyValue is the value of one of the tiny DAG's settings.
func tinyValue(t *testing.T, name string) string {
	t.Helper()
	for _, kv := range tiny {
		if k, v, _ := strings.Cut(kv, "="); k == name {
			return v
		}
	}
	t.Fatalf("tiny has no %s", name)
	return ""
}

func readManifest(t *testing.T, dir string) *format.Manifest {
	t.Helper()
	m, err := format.ReadManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func stderrOf(err error) []byte {
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.Stderr
	}
	return nil
}

// jobTime parses a time field of a job record (slurmctld's local time, to the second).
func jobTime(t *testing.T, rec map[string]string, field string) time.Time {
	t.Helper()
	v, err := time.ParseInLocation("2006-01-02T15:04:05", rec[field], time.Local)
	if err != nil {
		t.Fatalf("job %s: %s=%q: %v", rec["JobId"], field, rec[field], err)
	}
	return v
}

// slurmCluster is a Slurm cluster of this machine that a test started.
type slurmCluster struct {
	dir, conf, prefix string
	env               []string // the environment of Slurm's commands: SLURM_CONF, PATH
	daemons           []*exec.Cmd
}

// startSlurm starts munged, slurmctld and the slurmd of nodes n0 and n1 in a temporary
// directory, each on its own port, and waits until both nodes are idle; the cleanup
// cancels every job, stops the daemons and kills whatever still runs with this
// cluster's configuration. It skips the test without root, Slurm or munged.
func startSlurm(t *testing.T) *slurmCluster {
	t.Helper()
	if os.Getenv("CGO_ENABLED") == "0" {
		t.Skip("builds the tensor binaries, so it runs in make test-torch, not in the cgo-free pass")
	}
	if os.Geteuid() != 0 {
		t.Skip("not root: the test's slurmd must start jobs as their submitter, which needs root")
	}
	prefix := os.Getenv("MEMPO_SLURM")
	if prefix == "" {
		cmd := exec.Command("../build/slurm.sh")
		var why bytes.Buffer
		cmd.Stderr = &why
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("build/slurm.sh: %v\n%s", err, why.String())
		}
		if prefix = strings.TrimSpace(string(out)); prefix == "" {
			t.Skipf("no Slurm: %s", strings.TrimSpace(why.String()))
		}
	}
	munged, err := exec.LookPath("munged")
	if err != nil {
		if _, e := os.Stat("/usr/sbin/munged"); e != nil {
			t.Skip("no munged (Debian's munge) for Slurm's authentication")
		}
		munged = "/usr/sbin/munged"
	}
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	host, _, _ = strings.Cut(host, ".") // slurmctld compares SlurmctldHost with the short name

	// A directory of its own under /tmp: munged refuses a socket path that others can
	// write into, and t.TempDir's path may be long for a socket.
	dir, err := os.MkdirTemp("", "mempo-slurm-")
	if err != nil {
		t.Fatal(err)
	}
	cl := &slurmCluster{dir: dir, conf: filepath.Join(dir, "slurm.conf"), prefix: prefix}
	t.Cleanup(func() {
		cl.stop(t)
		os.RemoveAll(dir)
	})
	for _, d := range []string{"munge", "state", "spool-n0", "spool-n1", "gpu"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o711); err != nil {
			t.Fatal(err)
		}
	}
	key := make([]byte, 128)
	f, err := os.Open("/dev/urandom")
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.Read(key)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "munge", "key"), key, 0o600); err != nil {
		t.Fatal(err)
	}
	for i := range 8 { // GPUs for the gres/gpu plugin: character devices that do nothing
		if err := os.Symlink("/dev/null", filepath.Join(dir, "gpu", fmt.Sprintf("nvidia%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	ports := []int{freePort(t), freePort(t), freePort(t)}
	for ports[1] == ports[0] || ports[2] == ports[0] || ports[2] == ports[1] {
		ports = []int{freePort(t), freePort(t), freePort(t)}
	}
	conf := fmt.Sprintf(`ClusterName=mempotest
SlurmctldHost=%[1]s(127.0.0.1)
SlurmctldPort=%[3]d
SlurmdPort=%[4]d
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=%[2]s/munge/socket
SlurmUser=root
SlurmdUser=root
StateSaveLocation=%[2]s/state
SlurmdSpoolDir=%[2]s/spool-%%n
SlurmctldPidFile=%[2]s/slurmctld.pid
SlurmdPidFile=%[2]s/slurmd-%%n.pid
SlurmctldLogFile=%[2]s/slurmctld.log
SlurmdLogFile=%[2]s/slurmd-%%n.log
ProctrackType=proctrack/pgid
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
SlurmdParameters=config_overrides
ReturnToService=2
MpiDefault=none
SchedulerType=sched/builtin
KillWait=2
InactiveLimit=0
MinJobAge=600
NodeName=n0 NodeHostname=%[1]s NodeAddr=127.0.0.1 Port=%[4]d CPUs=16 Gres=gpu:8 State=UNKNOWN
NodeName=n1 NodeHostname=%[1]s NodeAddr=127.0.0.1 Port=%[5]d CPUs=16 Gres=gpu:8 State=UNKNOWN
PartitionName=main Nodes=ALL Default=YES MaxTime=INFINITE State=UP
`, host, dir, ports[0], ports[1], ports[2])
	if err := os.WriteFile(cl.conf, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	gres := fmt.Sprintf("Name=gpu File=%s/gpu/nvidia[0-7]\n", dir)
	if err := os.WriteFile(filepath.Join(dir, "gres.conf"), []byte(gres), 0o644); err != nil {
		t.Fatal(err)
	}
	cl.env = append(os.Environ(), "SLURM_CONF="+cl.conf, "PATH="+filepath.Join(prefix, "bin")+":"+os.Getenv("PATH"))

	cl.daemon(t, "munged", munged, "--foreground", "--force", "--socket="+filepath.Join(dir, "munge", "socket"),
		"--key-file="+filepath.Join(dir, "munge", "key"), "--log-file="+filepath.Join(dir, "munge", "log"),
		"--pid-file="+filepath.Join(dir, "munge", "pid"), "--seed-file="+filepath.Join(dir, "munge", "seed"))
	if err := cl.until(10*time.Second, func() bool { _, err := os.Stat(filepath.Join(dir, "munge", "socket")); return err == nil }); err != nil {
		t.Fatalf("munged made no socket: %v\n%s", err, cl.logs())
	}
	cl.daemon(t, "slurmctld", filepath.Join(prefix, "sbin", "slurmctld"), "-D", "-i", "-f", cl.conf)
	for _, n := range []string{"n0", "n1"} {
		cl.daemon(t, "slurmd-"+n, filepath.Join(prefix, "sbin", "slurmd"), "-D", "-N", n, "-f", cl.conf)
	}
	if err := cl.until(30*time.Second, func() bool {
		out, err := cl.command("sinfo", "-h", "-N", "-o", "%N %T").Output()
		return err == nil && strings.Count(string(out), " idle") == 2
	}); err != nil {
		out, _ := cl.command("sinfo", "-N", "-l").CombinedOutput()
		t.Fatalf("the nodes are not idle after 30 s: %v\n%s\n%s", err, out, cl.logs())
	}
	return cl
}

// command is one of Slurm's commands for this cluster.
func (cl *slurmCluster) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(cl.prefix, "bin", name), args...)
	cmd.Env = cl.env
	return cmd
}

// daemon starts one daemon in the foreground, its output in dir/name.out.
func (cl *slurmCluster) daemon(t *testing.T, name, path string, args ...string) {
	t.Helper()
	out, err := os.Create(filepath.Join(cl.dir, name+".out"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	cmd := exec.Command(path, args...)
	cmd.Env = cl.env
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	cl.daemons = append(cl.daemons, cmd)
}

// until polls ok every 100 ms until it holds, or fails after d or when a daemon exited.
func (cl *slurmCluster) until(d time.Duration, ok func() bool) error {
	for end := time.Now().Add(d); ; time.Sleep(100 * time.Millisecond) {
		for _, c := range cl.daemons {
			if exited(c) {
				return fmt.Errorf("%s exited", filepath.Base(c.Path))
			}
		}
		if ok() {
			return nil
		}
		if time.Now().After(end) {
			return fmt.Errorf("timed out after %s", d)
		}
	}
}

// exited says whether a started child has exited (it is a zombie until waited for).
func exited(c *exec.Cmd) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", c.Process.Pid))
	if err != nil {
		return true
	}
	_, rest, _ := strings.Cut(string(stat), ") ")
	return strings.HasPrefix(rest, "Z")
}

// wait waits until the cluster has no job left, then returns the jobs' records.
func (cl *slurmCluster) wait(t *testing.T, d time.Duration, logs string) []map[string]string {
	t.Helper()
	err := cl.until(d, func() bool {
		out, err := cl.command("squeue", "-h", "-o", "%i").Output()
		return err == nil && strings.TrimSpace(string(out)) == ""
	})
	if err != nil {
		out, _ := cl.command("squeue", "-o", "%i %j %T %r").CombinedOutput()
		t.Fatalf("jobs still queued: %v\n%s\n%s\n%s", err, out, cl.outputs(logs), cl.logs())
	}
	// slurmctld keeps finished jobs for MinJobAge, and shows each array task as a job.
	out, err := cl.command("scontrol", "--oneliner", "show", "job").Output()
	if err != nil {
		t.Fatalf("scontrol show job: %v\n%s", err, stderrOf(err))
	}
	var recs []map[string]string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		rec := map[string]string{}
		for _, m := range regexp.MustCompile(`(?:^|\s)(\w+)=(\S*)`).FindAllStringSubmatch(line, -1) {
			rec[m[1]] = m[2]
		}
		recs = append(recs, rec)
	}
	return recs
}

// outputs is the jobs' output files, each's last lines.
func (cl *slurmCluster) outputs(dir string) string {
	files, _ := filepath.Glob(filepath.Join(dir, "*.out"))
	return tails(files, 15)
}

// logs is the daemons' logs, each's last lines.
func (cl *slurmCluster) logs() string {
	files, _ := filepath.Glob(filepath.Join(cl.dir, "*.out"))
	more, _ := filepath.Glob(filepath.Join(cl.dir, "*.log"))
	return tails(append(append(files, more...), filepath.Join(cl.dir, "munge", "log")), 10)
}

func tails(files []string, n int) string {
	var b strings.Builder
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
		fmt.Fprintf(&b, "==> %s <==\n%s\n", f, strings.Join(lines[max(0, len(lines)-n):], "\n"))
	}
	return b.String()
}

// stop cancels every job, stops the daemons, and kills any process left that runs
// with this cluster's configuration (a job's, or a slurmstepd's): each inherits
// SLURM_CONF, a path no other cluster has.
func (cl *slurmCluster) stop(t *testing.T) {
	if len(cl.daemons) > 1 && !exited(cl.daemons[1]) { // slurmctld runs: cancel the jobs
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		scancel := exec.CommandContext(ctx, filepath.Join(cl.prefix, "bin", "scancel"), "--full", "--user=root")
		scancel.Env = cl.env
		if err := scancel.Run(); err == nil {
			cl.until(10*time.Second, func() bool {
				out, err := cl.command("squeue", "-h", "-o", "%i").Output()
				return err != nil || strings.TrimSpace(string(out)) == ""
			})
		}
	}
	for i := len(cl.daemons) - 1; i >= 0; i-- {
		c := cl.daemons[i]
		c.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { c.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Logf("%s did not stop on SIGTERM within 5 s; killing it", filepath.Base(c.Path))
			c.Process.Kill()
			<-done
		}
	}
	marker := []byte("SLURM_CONF=" + cl.conf + "\x00")
	procs, _ := filepath.Glob("/proc/[0-9]*/environ")
	for _, p := range procs {
		env, err := os.ReadFile(p)
		pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		if err != nil || pid == os.Getpid() || !bytes.Contains(env, marker) {
			continue
		}
		t.Logf("killing process %d left by the Slurm cluster", pid)
		syscall.Kill(pid, syscall.SIGKILL)
	}
}
