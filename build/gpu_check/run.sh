#!/usr/bin/env bash
# `make gpu-check`: one prepared run on a GPU machine that says whether mempo computes
# the same on CUDA as on the CPU, how fast it is there next to PyTorch eager, and
# whether an RL iteration of the demo runs with --device cuda. It writes a markdown
# report ($OUT/report.md when OUT is set, else runs/gpu-check/report.md) in which every
# section has its status (pass, fail or skip) and time:
#
#   libtorch   a CUDA libtorch 2.x: LIBTORCH (a path, or python: python3's torch), else
#              the torch/ of a Python environment whose torch has CUDA (the bench venv,
#              GPU_CHECK_PYTHON, python3), else LIBTORCH_CUDA=1 build/libtorch.sh (the
#              pinned wheel's CUDA libraries; its NVIDIA libraries must then be installed)
#   build      the test binaries of model/qwen2, train and stages/update, and the
#              binaries (make build CUDA=1: bin/cuda), compiled at once
#   parity     TestDeviceParity (logits, log-probs, greedy generation) and
#              TestDeviceParityUpdate (one PPO step with AdamW), CUDA against the CPU on
#              the tiny preset and a 0.5B-shaped model with 2 layers, float32 and
#              bfloat16, with the tolerances and the differences measured
#   demo       one RL iteration of pipelines/demo.mk (shrunk SFT, one variant) with
#              DEVICE=cuda, into a temporary run directory
#   bench      the Go benchmarks at the 0.5B and 1.5B shapes with 2 layers
#              (MEMPO_TEST_DEVICE=cuda, MEMPO_TEST_DTYPE=bfloat16, threads=2)
#   torch      the same workloads in PyTorch eager (build/bench_compare/compare.py
#              --device cuda), and the ratio table
#
# Correctness sections (parity, demo) run side by side; the timed ones then run
# alone on the GPU. A section that fails does not stop the others. A global budget
# (GPU_CHECK_BUDGET, 480 s) bounds the whole run: each section is skipped when fewer
# seconds are left than it needs, and killed when it would run past the budget.
#
# PyTorch is optional. The script never installs it unless told: GPU_CHECK_WHEELS=dir
# installs torch 2.11.0 and transformers 4.44.2 offline from a wheel directory (pip
# download -d dir torch==2.11.0 transformers==4.44.2 'numpy<2' on a machine with
# network), GPU_CHECK_INSTALL_TORCH=1 lets build/bench_compare/venv.sh install from
# PyPI; without torch the table has mempo's side only and the torch section says why.
#
# GPU_CHECK_DEVICE=cpu runs every section on the CPU with tiny shapes (parity -short:
# the CPU against itself; tiny benchmarks, one iteration; a smaller RL iteration), so
# that everything but CUDA itself is exercised on any machine in a few minutes.
#
# GPU_CHECK_PREBUILT=dir takes the binaries from dir/bin and dir/tests instead of
# building them (a bundle of make gpu-bundle, whose gpu-check.sh sets it along with
# LIBTORCH and LD_LIBRARY_PATH): the build section then only checks that they load.
#
# Settings: GPU_CHECK_DEVICE (cuda), GPU_CHECK_BUDGET (480 s), GPU_CHECK_DTYPE of the
# benchmarks (bfloat16 on cuda, float32 on cpu), GPU_CHECK_ITERS (3 on cuda, 1 on cpu),
# GPU_CHECK_BENCH (a |-list of benchmark names; default per device),
# GPU_CHECK_SECTIONS (a space-separated subset of the sections above), GPU_CHECK_WORK
# (runs/gpu-check: test binaries, the demo run, logs), GPU_CHECK_PYTHON.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)

# shellcheck source=sections.sh
. "$here/sections.sh"
# The sections, as run runs each one in a process group of its own: `run.sh section NAME`.
if [[ ${1:-} == section ]]; then
  SECTION=$2
  "section_$2"
  exit $?
fi

export GPU_CHECK_DEVICE=${GPU_CHECK_DEVICE:-cuda}
export BUDGET=${GPU_CHECK_BUDGET:-480}
export WORK=${GPU_CHECK_WORK:-$root/runs/gpu-check}
if [[ $GPU_CHECK_DEVICE == cpu ]]; then
  export BENCH_DTYPE=${GPU_CHECK_DTYPE:-float32} ITERS=${GPU_CHECK_ITERS:-1}
  export BENCH_QWEN2=${GPU_CHECK_BENCH_QWEN2:-LogProbsTiny|DecodeTiny16} BENCH_UPDATE=${GPU_CHECK_BENCH_UPDATE:-UpdateTiny}
else
  export BENCH_DTYPE=${GPU_CHECK_DTYPE:-bfloat16} ITERS=${GPU_CHECK_ITERS:-3}
  export BENCH_QWEN2=${GPU_CHECK_BENCH_QWEN2:-LogProbs05BShape2L|LogProbs15BShape2L|Decode05BShape2L16|Decode05BShape2L64|Decode15BShape2L16|Decode15BShape2L64}
  export BENCH_UPDATE=${GPU_CHECK_BENCH_UPDATE:-UpdateAdamW05BShape2L|UpdateAdamW15BShape2L}
fi
export BENCH_THREADS=${GPU_CHECK_THREADS:-2}
SECTIONS=${GPU_CHECK_SECTIONS:-libtorch build parity demo bench torch}
if [[ -n ${OUT:-} ]]; then
  report=$OUT/report.md LOGS=$OUT/gpu-check-logs
else
  report=$WORK/report.md LOGS=$WORK/logs
fi
export LOGS ROOT=$root STATE=$WORK/state
rm -rf "$LOGS" "$STATE"
mkdir -p "$LOGS" "$STATE" "$(dirname "$report")"
export START_EPOCH=$(date +%s)

left() { echo $((BUDGET - ($(date +%s) - START_EPOCH))); }

# run NAME NEED CAP: section NAME, skipped when fewer than NEED seconds of the budget
# are left, stopped after CAP seconds or at the budget's end. It records
# $STATE/NAME.{status,secs}; the section itself leaves a one-line note in
# $STATE/NAME.note (exit 0 pass, 77 skip, else fail).
run() {
  local name=$1 need=$2 cap=$3 l lim t0 rc status
  if [[ " $SECTIONS " != *" $name "* ]]; then
    return
  fi
  l=$(left)
  if ((l < need)); then
    echo skip >"$STATE/$name.status"
    echo 0 >"$STATE/$name.secs"
    echo "out of time: ${l}s of the budget left, the section needs about ${need}s" >"$STATE/$name.note"
    echo "gpu-check: $name: skipped (out of time)" >&2
    return
  fi
  lim=$((cap < l - 8 ? cap : l - 8))
  echo "gpu-check: $name: started (limit ${lim}s, log $LOGS/$name.log)" >&2
  t0=$(date +%s)
  # The section leads a process group of its own, so that the limit ends everything it
  # started (make's stages, test binaries), not the section's shell alone: TERM, which
  # the stages answer by stopping cleanly, then KILL 5 s later.
  setsid "$here/run.sh" section "$name" >"$LOGS/$name.log" 2>&1 &
  local pid=$!
  (
    trap 'kill "$sp" 2>/dev/null; exit 0' TERM
    sleep "$lim" &
    sp=$!
    wait "$sp"
    touch "$STATE/$name.timeout"
    kill -TERM -- "-$pid" 2>/dev/null
    sleep 5
    kill -KILL -- "-$pid" 2>/dev/null
  ) &
  local watch=$!
  wait "$pid"
  rc=$?
  kill "$watch" 2>/dev/null
  wait "$watch" 2>/dev/null
  echo $(($(date +%s) - t0)) >"$STATE/$name.secs"
  if [[ -f $STATE/$name.timeout ]]; then
    status=fail
    echo "timed out after ${lim}s (the limit of the section or the end of the budget)" >"$STATE/$name.note"
  else
    case $rc in
      0) status=pass ;;
      77) status=skip ;;
      *) status=fail ;;
    esac
  fi
  [[ -s $STATE/$name.note ]] || echo "exit $rc; see the log" >"$STATE/$name.note"
  echo "$status" >"$STATE/$name.status"
  echo "gpu-check: $name: $status in $(cat "$STATE/$name.secs")s: $(cat "$STATE/$name.note")" >&2
}

# Needs and caps are seconds on an H200 machine (16 cores): the first build compiles
# gotch's libtorch wrapper (about 2 minutes); the correctness sections share the GPU.
run libtorch 30 200
run build 60 300
run parity 40 200 &
run demo 40 200 &
wait
run bench 40 180
run torch 40 180

# shellcheck source=report.sh
. "$here/report.sh"
write_report >"$report"
echo "gpu-check: report in $report" >&2
if grep -qx fail "$STATE"/*.status 2>/dev/null; then
  exit 1
fi
