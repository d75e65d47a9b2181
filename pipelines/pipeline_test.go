package pipelines

import (
	"encoding/json"
	"maps"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/mempo/mempo/agent/task"
	"github.com/mempo/mempo/format"
)

// tiny sizes the whole DAG to run in about a minute: a small world, a few SFT steps,
// two iterations of two prompts × two samples per variant, two questions per test set.
// SFT trains in bfloat16, as the demo does where the CPU has it, so every RL stage reads
// and writes bfloat16 checkpoints with float32 master weights, and in two processes
// (`--procs 2`: its worker is the built mempo binary started again).
var tiny = []string{
	"ITERS=2", "VARIANTS=mempo grpo", "PROMPTS_PER_ITER=2", "PROTOCOL=demo-protocol.json", "DTYPE=bfloat16",
	"TASK_FLAGS=--people 40 --cities 12 --companies 12 --countries 4 --train 24 --test 2",
	"TEST_K=2,4",
	"INIT_FLAGS=--vocab 600",
	"SFT_FLAGS=--questions 4 --epochs 1 --max-turns 3 --threads 1 --procs 2",
	"ROLLOUT_FLAGS=--n 2 --max-turns 3 --max-new-tokens 16 --threads 1",
	"LOGPROB_FLAGS=--threads 1",
	"UPDATE_FLAGS=--lr 1e-4 --mini-batches 1 --threads 1",
	"EVAL_FLAGS=--limit 2 --max-turns 3 --max-new-tokens 16 --threads 1 --dtype float32",
	"STAGE_FLAGS=--progress none --log-level warn",
}

// tinyExcept is the tiny DAG's settings but those of the given variables.
func tinyExcept(names ...string) []string {
	var out []string
	for _, kv := range tiny {
		if name, _, _ := strings.Cut(kv, "="); !slices.Contains(names, name) {
			out = append(out, kv)
		}
	}
	return out
}

// samePolicyKL bounds |ppo_kl| of an update's first mini-batch against the log-prob
// stage's values for the same bfloat16 policy: 1e-6 where the CPU multiplies bfloat16
// natively (AVX512-BF16 or AMX-BF16, the rule embedded.mk's DTYPE follows), 1e-4
// elsewhere. Without those instructions libtorch's bfloat16 products round with the
// pass's shapes, and the update's training pass and the stage's scoring pass batch
// the same tokens differently: on a 2-core AMD EPYC with AVX2 only this test measured
// -3.48e-5, the same before and after the scoring pass last changed. The bound still
// asks for rounding only: a token scored at the wrong position or temperature moves
// its log-prob by whole units, not by the bfloat16 products' last bits.
func samePolicyKL() float64 {
	info, err := os.ReadFile("/proc/cpuinfo")
	if err == nil && regexp.MustCompile(`\b(avx512_bf16|amx_bf16)\b`).Match(info) {
		return 1e-6
	}
	return 1e-4
}

// buildBinaries builds every binary into dir/bin, with a fixed code version.
func buildBinaries(t *testing.T, dir string) string {
	t.Helper()
	if os.Getenv("CGO_ENABLED") == "0" {
		t.Skip("builds the tensor binaries, so it runs in make test-torch, not in the cgo-free pass")
	}
	if _, err := exec.LookPath("make"); err != nil {
		t.Fatalf("make not found: %v", err)
	}
	bin := filepath.Join(dir, "bin")
	build := exec.Command("go", "build", "-o", bin+"/", "../cmd/...")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	if err := os.WriteFile(filepath.Join(bin, "CODE_VERSION"), []byte("test\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return bin
}

// TestPipeline runs pipelines/mempo.mk end to end with the real binaries: task, index,
// init, SFT, two MemPO and two GRPO iterations, evaluation and curves. A second make
// runs no stage at all, and deleting one iteration's advantages recomputes only that
// stage: every other stage that make reruns is a cache hit.
func TestPipeline(t *testing.T) {
	dir := t.TempDir()
	bin := buildBinaries(t, dir)
	run := filepath.Join(dir, "run")
	make := func(targets ...string) string {
		t.Helper()
		args := append([]string{"--no-print-directory", "-j2", "-f", "mempo.mk", "BIN=" + bin, "RUN_DIR=" + run}, tiny...)
		cmd := exec.Command("make", append(args, targets...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("make %v: %v\n%s", targets, err, out)
		}
		return string(out)
	}

	first := make("run")
	table, err := os.ReadFile(filepath.Join(run, "eval", "results.md"))
	if err != nil {
		t.Fatal(err)
	}
	// Iteration 1 rolls the SFT policy out identically for both variants: the stage runs
	// once and GRPO's rollouts are a copy.
	if runs := regexp.MustCompile(`(?m)^rollout: wrote \S*/iter-1/rollouts`).FindAllString(first, -1); len(runs) != 1 {
		t.Errorf("iteration 1's rollouts written %d times, want once for both variants:\n%s", len(runs), first)
	}
	// Each (policy, test set) is a make target of its own, and the report's call finds
	// all of them cached: four policies on two test sets are rolled out eight times.
	if evals := regexp.MustCompile(`(?m)^rollout: wrote \S*/eval/`).FindAllString(first, -1); len(evals) != 8 {
		t.Errorf("evaluation rollouts written %d times, want 8 (4 policies x 2 test sets, each once):\n%s", len(evals), first)
	}
	for _, row := range []string{"| sft | 2 |", "| mempo | 4 |", "| grpo | 2 |", "| full | 4 |"} {
		if !strings.Contains(string(table), row) {
			t.Errorf("results.md has no row %q:\n%s", row, table)
		}
	}
	for _, f := range []string{"f1_vs_k.png", "pt_vs_k.png", "reward_vs_iter.png", "kl_vs_iter.png"} {
		if st, err := os.Stat(filepath.Join(run, "eval", f)); err != nil || st.Size() == 0 {
			t.Errorf("plot %s: %v", f, err)
		}
	}

	// The rollouts the binaries really write keep the invariants the memory pass needs
	// (observation_ids for every observation), as mempo verify checks them.
	for _, v := range []string{"mempo", "grpo"} {
		rolls := filepath.Join(run, v, "iter-1", "rollouts")
		if out, err := exec.Command(filepath.Join(bin, "mempo"), "verify", rolls).CombinedOutput(); err != nil {
			t.Errorf("mempo verify %s: %v\n%s", rolls, err, out)
		}
	}

	// The log-prob stage compares the sampling log-probs the rollout binary really wrote
	// with its old pass: both are the same bfloat16 policy at temperature 1, so the gap is
	// rounding, below the stage's warning threshold (logprob.DriftWarn, 1 nat). Its
	// manifest times the passes that ran: the reference pass only once the policy is no
	// longer the SFT model, the memory pass only for MemPO.
	for _, v := range []string{"mempo", "grpo"} {
		for _, it := range []string{"iter-1", "iter-2"} {
			dir := filepath.Join(run, v, it, "logprobs")
			m, err := format.ReadManifest(dir)
			if err != nil {
				t.Fatal(err)
			}
			if d, ok := m.Metrics["sampling_drift_max"]; !ok || d >= 1 {
				t.Errorf("%s: sampling_drift_max %v (present %v), want below 1", dir, d, ok)
			}
			want := []string{"old_pass"}
			if v == "mempo" {
				want = append(want, "memory_pass")
			}
			if it != "iter-1" {
				want = append(want, "ref_pass")
			}
			slices.Sort(want)
			if got := slices.Sorted(maps.Keys(m.Timings.Phases)); !slices.Equal(got, want) {
				t.Errorf("%s: timings' phases %v, want %v", dir, m.Timings.Phases, want)
			}
		}
	}

	checkAudit(t, bin, run)

	// The update scores what the upstream stages really wrote through tree passes over
	// shared prefixes (the default). Its first mini-batch runs the policy the log-prob
	// stage scored, so the new log-probs equal the old ones (ppo_kl ≈ 0), and its mean
	// entropy equals the unshared pass's. (The weights are no check here: the tiny
	// run's advantages are zero, and AdamW scales the rounding-level gradient up.)
	iter := filepath.Join(run, "mempo", "iter-1")
	unshared := filepath.Join(dir, "unshared")
	cmd := exec.Command(filepath.Join(bin, "mempo-update"), "--share-prefixes=false",
		"--policy", filepath.Join(run, "sft"), "--ref", filepath.Join(run, "sft"),
		"--rollouts", filepath.Join(iter, "rollouts"), "--logprobs", filepath.Join(iter, "logprobs"),
		"--advantages", filepath.Join(iter, "advantages"), "--seed", "1001",
		"--lr", "1e-4", "--mini-batches", "1", "--threads", "1", "--progress", "none", "--out", unshared)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("mempo-update --share-prefixes=false: %v\n%s", err, out)
	}
	shared, plain := firstStep(t, filepath.Join(iter, "policy")), firstStep(t, unshared)
	if bound := samePolicyKL(); math.Abs(shared.PPOKL) > bound {
		t.Errorf("mempo iter-1 update: ppo_kl %g on its first mini-batch, want |ppo_kl| <= %g (the log-prob stage's values)", shared.PPOKL, bound)
	}
	if d := math.Abs(shared.Entropy-plain.Entropy) / plain.Entropy; !(d <= 1e-5) {
		t.Errorf("mempo iter-1 update: mean entropy %v with shared prefixes, %v without: %.3g relative, want <= 1e-5",
			shared.Entropy, plain.Entropy, d)
	}

	// The same update across two processes (the worker is the built binary started
	// again), small micro-batches dealt among them, scores the same.
	procs := filepath.Join(dir, "procs")
	cmd = exec.Command(filepath.Join(bin, "mempo-update"), "--procs", "2", "--micro-token-budget", "256",
		"--policy", filepath.Join(run, "sft"), "--ref", filepath.Join(run, "sft"),
		"--rollouts", filepath.Join(iter, "rollouts"), "--logprobs", filepath.Join(iter, "logprobs"),
		"--advantages", filepath.Join(iter, "advantages"), "--seed", "1001",
		"--lr", "1e-4", "--mini-batches", "1", "--threads", "1", "--progress", "none", "--out", procs)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("mempo-update --procs 2: %v\n%s", err, out)
	}
	two := firstStep(t, procs)
	if two.Micro < 2 {
		t.Errorf("mempo iter-1 update on two processes: %d micro-batches, want several to deal", two.Micro)
	}
	// ppo_kl compares with the log-prob stage's values, which batch the tokens otherwise,
	// so it has the bound of the one-process update's (samePolicyKL).
	if bound := samePolicyKL(); math.Abs(two.PPOKL) > bound || math.Abs(two.Entropy-plain.Entropy)/plain.Entropy > 1e-5 || two.Tokens != plain.Tokens {
		t.Errorf("mempo iter-1 update on two processes: ppo_kl %g, entropy %v over %d tokens; want |ppo_kl| <= %g and one process's %v over %d",
			two.PPOKL, two.Entropy, two.Tokens, bound, plain.Entropy, plain.Tokens)
	}

	if out := make("run"); strings.Contains(out, bin) {
		t.Errorf("second make ran stages, want nothing to do:\n%s", out)
	}

	if err := os.RemoveAll(filepath.Join(run, "mempo", "iter-1", "advantages")); err != nil {
		t.Fatal(err)
	}
	out := make("run")
	wrote := regexp.MustCompile(`(?m)^(\S+): wrote `).FindAllStringSubmatch(out, -1)
	if len(wrote) != 1 || wrote[0][1] != "advantage" {
		t.Errorf("after deleting iter-1 advantages, stages that wrote output = %v, want only advantage:\n%s", wrote, out)
	}
	for _, stage := range []string{"mempo-update", "mempo-rollout"} {
		if !strings.Contains(out, stage) {
			t.Errorf("make did not rerun %s downstream of the advantages (as a cache hit):\n%s", stage, out)
		}
	}
	if regexp.MustCompile(`--out \S*/grpo/`).MatchString(out) {
		t.Errorf("deleting mempo's advantages reran grpo stages:\n%s", out)
	}
}

// checkAudit checks what the memory audit reads in a real run: gen-task's prompts carry
// one or more supporting facts per objective (the memory-pass side is checked on real
// rollouts in stages/rollout's boundary test, since the tiny policy's 16-token turns
// close no memory), and `mempo inspect --turns` audits the rollouts the binaries wrote.
func checkAudit(t *testing.T, bin, run string) {
	t.Helper()
	prompts, err := format.ReadDataset[format.Prompt](filepath.Join(run, "task", "prompts-train"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range prompts {
		if len(p.Facts) < len(p.Golds) {
			t.Fatalf("prompt %s: %d facts for %d objectives, want one or more per objective", p.UID, len(p.Facts), len(p.Golds))
		}
	}
	rollouts := filepath.Join(run, "mempo", "iter-1", "rollouts")
	out, err := exec.Command(filepath.Join(bin, "mempo"), "inspect", "--turns", rollouts).CombinedOutput()
	if err != nil || !regexp.MustCompile(`(?m)^`+regexp.QuoteMeta(rollouts)+`\s+\d+\s+\d+\s+\d\.\d{3}\s`).Match(out) {
		t.Errorf("mempo inspect --turns: %v, want one audit line for the rollouts:\n%s", err, out)
	}
}

// firstStep reads the first mini-batch's figures from the update checkpoint in dir.
func firstStep(t *testing.T, dir string) (m struct {
	PPOKL   float64 `json:"ppo_kl"`
	Entropy float64 `json:"entropy"`
	Tokens  int     `json:"tokens"`
	Micro   int     `json:"micro_batches"`
}) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "_metrics.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	first, _, _ := strings.Cut(string(b), "\n")
	if err := json.Unmarshal([]byte(first), &m); err != nil {
		t.Fatalf("%s/_metrics.jsonl: %v", dir, err)
	}
	return m
}

// TestExperimentSeedsInTurn checks make's rule database: each seed waits for the one
// before it in SEEDS (an order-only prerequisite), so no two seeds' SFTs share the cores.
func TestExperimentSeedsInTurn(t *testing.T) {
	out, _ := exec.Command("make", "--no-print-directory", "-C", "..", "-f", "pipelines/experiment.mk", "-pq",
		"SEEDS=3 1 2", "EXP_DIR="+t.TempDir(), "no-such-target").Output() // -q exits non-zero
	rules := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^(seed-\d+):(.*)$`).FindAllStringSubmatch(string(out), -1) {
		rules[m[1]] = m[2]
	}
	for seed, after := range map[string]string{"seed-3": "", "seed-1": "seed-3", "seed-2": "seed-1"} {
		rule, ok := rules[seed]
		_, order, _ := strings.Cut(rule, "|")
		if !ok || strings.TrimSpace(order) != after {
			t.Errorf("rule %s:%s; want it after %q only", seed, rule, after)
		}
	}
}

// TestExperimentMixK checks the mixed-K setting's defaults in make's database: five seeds
// in turn, MemPO with and without --mem-content-only against GRPO, training questions of
// 2 to 4 objectives, test sets of 2, 4 and 6.
func TestExperimentMixK(t *testing.T) {
	out, _ := exec.Command("make", "--no-print-directory", "-C", "..", "-f", "pipelines/experiment.mk", "-pq",
		"SETTING=mixk", "no-such-target").Output() // -q exits non-zero
	for _, want := range []string{`(?m)^SEEDS = 1 2 3 4 5$`, `(?m)^VARIANTS = mempo grpo memcontent$`, `(?m)^EXP_DIR = runs/exp-mixk$`,
		`(?m)^TASK_FLAGS = .*--train-k 2 --train-k-max 4\b`, `(?m)^TEST_K = 2,4,6$`, `(?m)^seed-5: .*\| seed-4$`} {
		if !regexp.MustCompile(want).Match(out) {
			t.Errorf("make -p SETTING=mixk: no line matching %s", want)
		}
	}
}

// TestExperiment runs pipelines/experiment.mk's mixed-K setting (SETTING=mixk) on a toy
// size — four variants × two seeds × one iteration on one shared task whose training
// questions have 2 or 3 objectives — and checks the aggregation end to end: the report
// names both seeds, gives every policy an interval, and compares mempo against the grpo
// baseline; the curves have their spread over seeds. A second make runs no stage.
// ctxbase and memcontent run the harness's predefined flags for the context baseline and
// the memory advantage on content tokens through the binaries.
func TestExperiment(t *testing.T) {
	dir := t.TempDir()
	bin := buildBinaries(t, dir)
	exp := filepath.Join(dir, "exp")
	make := func() string {
		t.Helper()
		args := append([]string{"--no-print-directory", "-j2", "-C", "..", "-f", "pipelines/experiment.mk", "BIN=" + bin, "EXP_DIR=" + exp,
			"SETTING=mixk", "SEEDS=1 2", "ITERS=1", "BOOTSTRAP=200"}, tinyExcept("TASK_FLAGS")...)
		// The protocol path is relative to the repository root here.
		cmd := exec.Command("make", append(args, "PROTOCOL=pipelines/demo-protocol.json", "VARIANTS=mempo grpo ctxbase memcontent",
			"TASK_FLAGS=--people 40 --cities 12 --companies 12 --countries 4 --train 24 --test 2 --train-k 2 --train-k-max 3", "run")...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("make run: %v\n%s", err, out)
		}
		return string(out)
	}
	make()
	report := filepath.Join(exp, "report")
	md, err := os.ReadFile(filepath.Join(report, "results.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| mempo | 2 | 2 |", "| grpo | 2 | 2 |", "| ctxbase | 2 | 2 |", "| memcontent | 4 | 2 |", "| sft | 4 | 2 |", "vs grpo", "seed1", "seed2"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("results.md lacks %q:\n%s", want, md)
		}
	}
	lp, err := format.ReadManifest(filepath.Join(exp, "seed-1", "ctxbase", "iter-1", "logprobs"))
	if err != nil {
		t.Fatal(err)
	}
	var scored struct {
		PFull bool `json:"p_full"`
		PCtx  bool `json:"p_ctx"`
	}
	if err := json.Unmarshal(lp.Config, &scored); err != nil || scored.PFull || !scored.PCtx {
		t.Errorf("ctxbase log-probs: config %s (%v), want p_ctx scored and p_full not", lp.Config, err)
	}
	adv, err := format.ReadManifest(filepath.Join(exp, "seed-1", "memcontent", "iter-1", "advantages"))
	if err != nil {
		t.Fatal(err)
	}
	var advCfg struct {
		ContentOnly bool `json:"mem_content_only"`
	}
	if err := json.Unmarshal(adv.Config, &advCfg); err != nil || !advCfg.ContentOnly {
		t.Errorf("memcontent advantages: config %s (%v), want mem_content_only", adv.Config, err)
	}
	var summary task.Summary
	if b, err := os.ReadFile(filepath.Join(exp, "task", "task.json")); err != nil || json.Unmarshal(b, &summary) != nil {
		t.Fatalf("task.json: %v", err)
	}
	if d := summary.Datasets[0]; d.Split != "train" || d.K != 2 || d.KMax != 3 {
		t.Errorf("training set %+v, want k 2 to 3", d)
	}
	csv, err := os.ReadFile(filepath.Join(report, "results.csv"))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^mempo,2,diff_f1,grpo,`).Match(csv) {
		t.Errorf("results.csv has no paired F1 difference of mempo against grpo at K=2:\n%s", csv)
	}
	curves, err := os.ReadFile(filepath.Join(report, "curves.csv"))
	if err != nil {
		t.Fatal(err)
	}
	for _, metric := range []string{"reward", "zero_spread", "invalid"} {
		if !regexp.MustCompile(`(?m)^mempo,` + metric + `,1,2,`).Match(curves) {
			t.Errorf("curves.csv has no %s of iteration 1 over 2 seeds for mempo:\n%s", metric, curves)
		}
	}
	turns, err := os.ReadFile(filepath.Join(report, "turns.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(regexp.MustCompile(`(?m)/seed-[12]/eval/\w+/k[24]/rollouts\s+\d+`).FindAll(turns, -1)); n != 2*4*2 {
		t.Errorf("turns.txt has %d audit lines, want one per seed, variant and K (16):\n%s", n, turns)
	}
	for _, f := range []string{"f1_vs_k.png", "success_vs_k.png", "reward_vs_iter.png", "zero_spread_vs_iter.png", "invalid_vs_iter.png"} {
		if st, err := os.Stat(filepath.Join(report, f)); err != nil || st.Size() == 0 {
			t.Errorf("plot %s: %v", f, err)
		}
	}
	if out := make(); regexp.MustCompile(`(?m)^\S+: wrote `).MatchString(out) {
		t.Errorf("second make wrote a dataset, want only cache hits and the report:\n%s", out)
	}
}
