# The sections of build/gpu_check/run.sh, one function each, run in a process of
# their own under timeout with the log on stdout. Each exits 0 (pass), 77 (skip) or
# anything else (fail), with a one-line note in $STATE/<name>.note and, where it has
# one, a markdown part of the report in $STATE/<name>.md. What a later section needs
# travels in files under $STATE: libtorch.path, tests/, bin.path, python.path.

# The section is the one run.sh runs (SECTION), else the caller's name.
note() { echo "$*" >"$STATE/${SECTION:-${FUNCNAME[1]#section_}}.note"; }
skip() {
  echo "$*" >"$STATE/${SECTION:-${FUNCNAME[1]#section_}}.note"
  exit 77
}
fail() {
  echo "$*" >"$STATE/${SECTION:-${FUNCNAME[1]#section_}}.note"
  exit 1
}
cuda() { [[ $GPU_CHECK_DEVICE != cpu ]]; }

# gpus lists the GPUs nvidia-smi sees, one per line; nothing without one.
gpus() { nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null; }

# torch_dir prints the torch/ directory of python $1 when it holds a torch 2.x with
# libtorch_cuda, which is a complete CUDA libtorch (headers included) for build/go.sh.
torch_dir() {
  local d
  d=$(LIBTORCH=python PYTHON=$1 "$ROOT/build/libtorch.sh" 2>/dev/null) &&
    [[ -f $d/lib/libtorch_cuda.so && $("$ROOT/build/libtorch_version.sh" "$d") == 2.* ]] && echo "$d"
}

# pythons lists the interpreters to try for PyTorch, most specific first.
pythons() {
  local venv=${MEMPO_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mempo}/bench-venv
  [[ -n ${GPU_CHECK_PYTHON:-} ]] && echo "$GPU_CHECK_PYTHON"
  [[ -x $venv/bin/python ]] && echo "$venv/bin/python"
  [[ -x $WORK/venv/bin/python ]] && echo "$WORK/venv/bin/python"
  command -v python3 || true
}

section_libtorch() {
  local lt=""
  if [[ -n ${GPU_CHECK_PREBUILT:-} ]]; then
    # The prebuilt binaries link libtorch_cuda, so even the CPU mode needs a CUDA torch:
    # the one LIBTORCH names (the bundle's gpu-check.sh resolves it and puts its lib/ on
    # LD_LIBRARY_PATH, ahead of the binaries' RUNPATH into the build machine's cache).
    [[ -n ${LIBTORCH:-} ]] || fail "GPU_CHECK_PREBUILT needs LIBTORCH (python, or the path of a CUDA torch 2.11)"
    lt=$("$ROOT/build/libtorch.sh") || fail "build/libtorch.sh failed (the log says why)"
    [[ -f $lt/lib/libtorch_cuda.so ]] || fail "$lt has no lib/libtorch_cuda.so: the prebuilt binaries need a CUDA torch"
    if cuda; then
      gpus | grep -q . || fail "nvidia-smi lists no GPU (driver missing, or no GPU on this machine)"
      gpus
    fi
    echo "$lt" >"$STATE/libtorch.path"
    note "$lt (prebuilt binaries)$(cuda && echo "; $(gpus | head -1)")"
    return 0
  fi
  if ! cuda; then
    lt=$("$ROOT/build/libtorch.sh") || fail "build/libtorch.sh failed (the log says why)"
    echo "$lt" >"$STATE/libtorch.path"
    note "CPU mode: $lt"
    return 0
  fi
  gpus | grep -q . || fail "nvidia-smi lists no GPU (driver missing, or no GPU on this machine)"
  gpus
  if [[ -n ${LIBTORCH:-} ]]; then
    lt=$("$ROOT/build/libtorch.sh") || lt=""
  else
    local py
    while read -r py; do
      lt=$(torch_dir "$py") && [[ -n $lt ]] && { echo "using the torch/ of $py"; break; }
    done < <(pythons)
    if [[ -z $lt ]]; then
      echo "no Python with a CUDA torch; trying LIBTORCH_CUDA=1 build/libtorch.sh (cached, or about 560 MB from PyPI)"
      lt=$(LIBTORCH_CUDA=1 timeout 150 "$ROOT/build/libtorch.sh") || lt=""
    fi
  fi
  [[ -n $lt && -f $lt/lib/libtorch_cuda.so ]] ||
    fail "no CUDA libtorch: set LIBTORCH=python (a Python whose torch has CUDA) or LIBTORCH=/path, or provide a Python with torch and CUDA (GPU_CHECK_PYTHON)"
  echo "$lt" >"$STATE/libtorch.path"
  note "$lt; $(gpus | head -1)"
}

section_build() {
  local lt tests=$WORK/tests bin=bin
  lt=$(cat "$STATE/libtorch.path" 2>/dev/null) || skip "no libtorch (see the libtorch section)"
  [[ -n ${GPU_CHECK_PREBUILT:-} ]] && prebuilt
  export LIBTORCH=$lt
  cuda && bin=bin/cuda
  rm -rf "$tests"
  mkdir -p "$tests"
  cd "$ROOT" || exit 1
  timeout 60 go mod download ||
    fail "the Go modules are not in $(go env GOMODCACHE) and the module proxy does not answer: copy that directory from a machine that has built mempo"
  # One go command per output, side by side: the first build compiles gotch's wrapper
  # against this libtorch once per process, in parallel on a many-core machine.
  # (vet is make test's; here it only costs time.)
  "$ROOT/build/go.sh" test -c -vet=off -o "$tests/" ./model/qwen2/ ./train/ ./stages/update/ ./train/collective/ >"$WORK/build-tests.txt" 2>&1 &
  local tpid=$!
  if cuda; then
    make --no-print-directory build CUDA=1 >"$WORK/build-bin.txt" 2>&1 &
  else
    make --no-print-directory build >"$WORK/build-bin.txt" 2>&1 &
  fi
  local bpid=$!
  # Each half serves the sections that need it even when the other failed.
  local bad=()
  wait $tpid
  local trc=$?
  wait $bpid
  local brc=$?
  echo "== go test -c (exit $trc)"
  cat "$WORK/build-tests.txt"
  echo "== make build (exit $brc)"
  cat "$WORK/build-bin.txt"
  if ((trc == 0)) && [[ -x $tests/qwen2.test && -x $tests/train.test && -x $tests/update.test && -x $tests/collective.test ]]; then
    echo "$tests" >"$STATE/tests.path"
  else
    bad+=("go test -c (parity, bench)")
  fi
  if ((brc == 0)) && [[ -x $bin/mempo && -x $bin/mempo-rollout ]]; then
    ldd "$bin/mempo-rollout" | grep -E 'libtorch|not found'
    if cuda && ! ldd "$bin/mempo-rollout" | grep -q 'libtorch_cuda.so => /'; then
      bad+=("$bin/mempo-rollout does not load libtorch_cuda.so")
    else
      echo "$ROOT/$bin" >"$STATE/bin.path"
    fi
  else
    bad+=("make build (demo)")
  fi
  ((${#bad[@]} == 0)) || fail "failed: $(IFS=';'; echo "${bad[*]}") (the log says why)"
  note "test binaries in $tests; binaries in $bin/"
}

# prebuilt is the build section of a bundle (build/gpu_bundle.sh): nothing to compile;
# it checks that the bundle's binaries load this torch and its CUDA libraries, and that
# a stage with --device cuda and every GPU hidden stops with the no-device error.
prebuilt() {
  local pre=$GPU_CHECK_PREBUILT t bad=() ver
  for t in qwen2 train update collective; do
    [[ -x $pre/tests/$t.test ]] || bad+=("no $pre/tests/$t.test")
    if ldd "$pre/tests/$t.test" | grep 'not found'; then bad+=("$t.test: libraries not found"); fi
  done
  ((${#bad[@]} == 0)) && echo "$pre/tests" >"$STATE/tests.path"
  "$ROOT/build/check_cuda_build.sh" "$pre/bin" || bad+=("build/check_cuda_build.sh $pre/bin")
  ver=$("$pre/bin/mempo" version) || bad+=("mempo version failed")
  echo "$ver"
  [[ $ver == *"libtorch 2.11."* ]] || bad+=("mempo runs on '$ver', built for libtorch 2.11")
  ((${#bad[@]} == 0)) || fail "prebuilt: $(IFS=';'; echo "${bad[*]}") (the log says why)"
  echo "$pre/bin" >"$STATE/bin.path"
  note "prebuilt binaries of revision $(cat "$pre/REVISION" 2>/dev/null) load $(grep -o 'libtorch [0-9.]*' <<<"$ver") from $lt; the no-device error holds"
  exit 0
}

# pkg_dir PKG: where PKG's test binary runs: its package directory as under go test, or
# in a bundle, which has no sources, a scratch one (the parity tests and benchmarks
# read no testdata).
pkg_dir() {
  local dir
  case $1 in qwen2) dir=model/qwen2 ;; train) dir=train ;; update) dir=stages/update ;; collective) dir=train/collective ;; esac
  if [[ -d $ROOT/$dir ]]; then
    echo "$ROOT/$dir"
  else
    mkdir -p "$WORK/cwd/$1" && echo "$WORK/cwd/$1"
  fi
}

# parity_run PKG TEST: the device parity test TEST of the test binary PKG.test, run in
# its package directory, verbose; prints its output.
parity_run() {
  local tests args=(-test.run "^$2\$" -test.v -test.count=1 -test.timeout=10m)
  tests=$(cat "$STATE/tests.path")
  cuda || args+=(-test.short)
  (cd "$(pkg_dir "$1")" && MEMPO_TEST_DEVICE=$GPU_CHECK_DEVICE "$tests/$1.test" "${args[@]}")
}

section_parity() {
  [[ -f $STATE/tests.path ]] || skip "no test binaries (see the build section)"
  local rc=0 log=$WORK/parity-out
  mkdir -p "$log"
  # Both binaries at once: each compares the device with the CPU, whose side takes
  # most of the time, and there are cores for both.
  parity_run qwen2 TestDeviceParity >"$log/qwen2.txt" 2>&1 &
  local p1=$!
  parity_run train TestDeviceParityUpdate >"$log/train.txt" 2>&1 &
  local p2=$!
  wait $p1 || rc=1
  wait $p2 || rc=1
  # The collectives of CUDA tensors (NCCL), one rank a GPU, after the parity tests.
  parity_run collective '(TestCUDA|TestNCCL)' >"$log/collective.txt" 2>&1 || rc=1
  cat "$log/qwen2.txt" "$log/train.txt" "$log/collective.txt"
  local n bad
  n=$(cat "$log/qwen2.txt" "$log/train.txt" | grep -c '^ *parity_device_test.go:[0-9]*: parity .*: \(ok\|FAIL\)$')
  bad=$(cat "$log/qwen2.txt" "$log/train.txt" | grep -c '^ *parity_device_test.go:[0-9]*: parity .*: FAIL$')
  parity_table "$log/qwen2.txt" "$log/train.txt" "$log/collective.txt" >"$STATE/parity.md"
  if grep -q -- '--- SKIP: TestDeviceParity' "$log/qwen2.txt" "$log/train.txt"; then
    skip "$(grep -h -A1 -- '--- SKIP: TestDeviceParity' "$log/qwen2.txt" | tail -1 | sed 's/^ *//')"
  fi
  ((rc == 0)) || fail "$bad of $n comparisons over tolerance, or a test failed (see the log)"
  note "$n comparisons within tolerance"
}

# parity_table turns the parity lines of the go test -v outputs $@ into a markdown
# table, followed by the greedy rows that matched and the tests that failed or skipped.
parity_table() {
  echo "| test | quantity | max \|Δ\| | mean \|Δ\| | tolerance max / mean | values | verdict |"
  echo "|---|---|---|---|---|---|---|"
  sed -n 's/^ *parity_device_test.go:[0-9]*: parity \([^ ]*\) \(.*\): max|Δ| \([^ ]*\) mean|Δ| \([^ ]*\) over \([0-9]*\) values; tolerance \([^ ]*\) \/ \([^ ]*\) .*: \(ok\|FAIL\)$/| \1 | \2 | \3 | \4 | \6 \/ \7 | \5 | \8 |/p' "$@"
  echo
  sed -n 's/^ *parity_device_test.go:[0-9]*: parity \([^ ]*\) greedy: \(.*\)$/- \1: \2/p' "$@"
  grep -h -E '^ *--- (FAIL|SKIP)' "$@" | sed 's/^ */- /'
}

section_demo() {
  [[ -f $STATE/bin.path ]] || skip "no binaries (see the build section)"
  command -v make >/dev/null || skip "no make on PATH: the iteration runs pipelines/demo.mk (install make)"
  local bin run=$WORK/demo t0 prompts=4 rollout
  bin=$(cat "$STATE/bin.path")
  rollout="--n 8 --max-turns 8 --max-new-tokens 64 --prompts-per-shard 16 --temperature 0.5 --threads 1"
  if ! cuda; then # a smaller iteration: 2 prompts of 4 samples, at most 4 turns
    prompts=2 rollout="--n 4 --max-turns 4 --max-new-tokens 48 --prompts-per-shard 16 --temperature 0.5 --threads 1"
  fi
  rm -rf "$run"
  cd "$ROOT" || exit 1
  t0=$(date +%s)
  # One iteration of one variant from a 64-question SFT: each tensor stage gets
  # --device (pipelines/mempo.mk DEVICE), the rest is the demo's configuration.
  make --no-print-directory -f pipelines/demo.mk train BIN="$bin" RUN_DIR="$run" ITERS=1 VARIANTS=mempo \
    DEVICE="$GPU_CHECK_DEVICE" SFT_QUESTIONS=64 PROMPTS_PER_ITER=$prompts ROLLOUT_FLAGS="$rollout" ||
    fail "the RL iteration failed after $(($(date +%s) - t0))s (the log names the stage)"
  local ck=$run/mempo/iter-1/policy/checkpoint.json
  [[ -f $ck ]] || fail "no $ck after the iteration"
  {
    echo "One RL iteration of pipelines/demo.mk with DEVICE=$GPU_CHECK_DEVICE (SFT on 64 questions, then rollout of $prompts prompts: $rollout; score, log-probs, advantages, update) in $(($(date +%s) - t0)) s, into $run:"
    echo
    echo '```'
    for d in task index init sft mempo/iter-1/rollouts mempo/iter-1/scores mempo/iter-1/logprobs mempo/iter-1/advantages mempo/iter-1/policy; do
      printf '%-28s %s\n' "$d" "$(ls "$run/$d" 2>/dev/null | wc -l) entries"
    done
    echo '```'
  } >"$STATE/demo.md"
  note "one iteration in $(($(date +%s) - t0))s, policy $ck"
}

# bench_run PKG NAMES: the benchmarks NAMES (a |-list) of PKG.test at BENCH_THREADS
# threads on the check's device and dtype; the Benchmark lines go to stdout.
bench_run() {
  local tests
  tests=$(cat "$STATE/tests.path")
  (cd "$(pkg_dir "$1")" && MEMPO_TEST_DEVICE=$GPU_CHECK_DEVICE MEMPO_TEST_DTYPE=$BENCH_DTYPE "$tests/$1.test" \
    -test.run '^$' -test.bench "^Benchmark($2)\$/^threads=$BENCH_THREADS\$" -test.benchtime "${ITERS}x" -test.timeout 10m)
}

section_bench() {
  [[ -f $STATE/tests.path ]] || skip "no test binaries (see the build section)"
  local go=$WORK/go.txt rc=0
  : >"$go"
  for pkg in qwen2 update; do
    local names=$BENCH_QWEN2
    [[ $pkg == update ]] && names=$BENCH_UPDATE
    bench_run "$pkg" "$names" | tee "$WORK/go-$pkg.txt" || rc=1
    grep '^Benchmark' "$WORK/go-$pkg.txt" >>"$go"
  done
  ((rc == 0)) || fail "a benchmark failed (see the log)"
  local n
  n=$(grep -c '^Benchmark' "$go")
  ((n > 0)) || fail "no benchmark ran"
  note "$n benchmarks, $BENCH_DTYPE, $ITERS iterations each after a warm-up"
}

# torch_python prints an interpreter with torch and transformers (that sees a GPU on
# cuda), installing them first when GPU_CHECK_WHEELS or GPU_CHECK_INSTALL_TORCH asks;
# returns 1 with the reason on stderr without one.
torch_python() {
  local py check='import torch, transformers, sys; sys.exit(0 if (sys.argv[1] == "cpu" or torch.cuda.is_available()) else 3)'
  while read -r py; do
    if "$py" -c "$check" "$GPU_CHECK_DEVICE" 2>/dev/null; then
      echo "$py"
      return 0
    fi
  done < <(pythons)
  if [[ -n ${GPU_CHECK_WHEELS:-} ]]; then
    echo "installing torch 2.11.0 and transformers 4.44.2 from $GPU_CHECK_WHEELS into $WORK/venv (offline)" >&2
    rm -rf "$WORK/venv"
    if python3 -m venv "$WORK/venv" &&
      "$WORK/venv/bin/python" -m pip install --no-index --find-links "$GPU_CHECK_WHEELS" --progress-bar off \
        torch==2.11.0 transformers==4.44.2 'numpy<2' >&2 &&
      "$WORK/venv/bin/python" -c "$check" "$GPU_CHECK_DEVICE"; then
      echo "$WORK/venv/bin/python"
      return 0
    fi
    echo "the offline install from $GPU_CHECK_WHEELS failed (above)" >&2
  fi
  if [[ ${GPU_CHECK_INSTALL_TORCH:-0} == 1 ]]; then
    # shellcheck source=../bench_compare/venv.sh
    . "$ROOT/build/bench_compare/venv.sh"
    if venv_install && "$venv/bin/python" -c "$check" "$GPU_CHECK_DEVICE"; then
      echo "$venv/bin/python"
      return 0
    fi
  fi
  echo "no Python with torch and transformers$(cuda && echo ' that sees a GPU'); set GPU_CHECK_PYTHON, GPU_CHECK_WHEELS=dir or GPU_CHECK_INSTALL_TORCH=1" >&2
  return 1
}

section_torch() {
  local go=$WORK/go.txt py bc=$ROOT/build/bench_compare
  [[ -s $go ]] || skip "no Go benchmark results to compare with (see the bench section)"
  local pattern="^(${BENCH_QWEN2}|${BENCH_UPDATE})/threads=${BENCH_THREADS}\$"
  if ! py=$(torch_python 2>"$WORK/torch-python.txt"); then
    cat "$WORK/torch-python.txt"
    go_table "$go" >"$STATE/torch.md"
    skip "$(tail -1 "$WORK/torch-python.txt")"
  fi
  cat "$WORK/torch-python.txt"
  echo "$py" >"$STATE/python.path"
  "$py" -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)'
  if ! "$py" "$bc/compare.py" torch --device "$GPU_CHECK_DEVICE" --dtype "$BENCH_DTYPE" --iters "$ITERS" \
    --bench "$pattern" --out "$WORK/torch.json"; then
    go_table "$go" >"$STATE/torch.md"
    fail "compare.py torch failed (see the log)"
  fi
  "$py" "$bc/compare.py" table --go "$go" --torch "$WORK/torch.json" >"$STATE/torch.md" ||
    fail "compare.py table failed (see the log)"
  cat "$STATE/torch.md"
  note "$("$py" -c 'import torch; print("torch", torch.__version__)'), $BENCH_DTYPE"
}

# go_table prints mempo's benchmark rates as a markdown table, for when PyTorch's
# side is missing (compare.py's parser; the table itself needs no torch).
go_table() {
  python3 - "$1" "$ROOT/build/bench_compare" <<'EOF'
import sys
sys.path.insert(0, sys.argv[2])
import compare
go = compare.parse_go(sys.argv[1])
print("mempo's side only (PyTorch did not run):\n")
print("| benchmark | best-tokens/s | tokens/s | decode-tokens/s | gemm-fraction | peak GEMM GFLOP/s |")
print("|---|---|---|---|---|---|")
for name, v in go.items():
    cells = [compare.num(v[k]) if k in v else "" for k in ("best-tokens/s", "tokens/s", "decode-tokens/s")]
    cells.append(f"{v['gemm-fraction']:.2f}" if "gemm-fraction" in v else "")
    cells.append(f"{v['gemm-GFLOP/s']:.0f}" if "gemm-GFLOP/s" in v else "")
    print(f"| {name} | " + " | ".join(cells) + " |")
EOF
}
