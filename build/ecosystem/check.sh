#!/usr/bin/env bash
# Opens a real run's datasets and checkpoints with the tools the README names:
# pyarrow.dataset, pandas.read_parquet, DuckDB and transformers' AutoTokenizer
# (check.py says what each must give), then serves its policy with `mempo
# serve-policy` and drives every endpoint and option through OpenAI's Python client
# (serve_check.py).
#
#   build/ecosystem/check.sh            # a fresh tiny run in runs/ecosystem, then the check
#   build/ecosystem/check.sh RUN_DIR    # check an existing run, e.g. runs/demo
#
# The tiny run is pipelines/mempo.mk's first MemPO iteration at the end-to-end test's
# sizes (task, index, init, SFT, rollouts, scores, log-probs, advantages, update: about
# 20 s on 2 cores), with bin/ from `make build` (BIN=DIR: binaries built elsewhere).
#
# The Python is venv.sh's: the bench environment of build/bench_compare/venv.sh when it
# already has every module check.py imports, else a small environment of this directory's
# requirements.txt (pinned pyarrow, pandas, DuckDB, transformers; no torch) that the first
# run installs from PyPI into ~/.cache/mempo/ecosystem-venv (ECOSYSTEM_VENV=DIR puts it
# elsewhere and leaves the bench environment unused; PYTHON picks the CPython 3.10-3.14
# that makes it). The script skips, with one
# line saying why and exit 0, only without such a Python, or without venv and pip for it,
# or when the package index is unreachable; a pip that fails otherwise fails the check and
# names its log.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
# shellcheck source=venv.sh
. "$here/venv.sh"

rc=0
py=$(eco_python) || rc=$?
case $rc in
0) ;;
2) exit 0 ;; # eco_python said why it skipped
*) exit 1 ;;
esac

run=${1:-}
if [[ -z $run ]]; then
  run=$root/runs/ecosystem
  make=${MAKE:-make}
  if [[ -z ${BIN:-} ]]; then
    "$make" --no-print-directory -C "$root" build
  fi
  rm -rf "$run" # the check is of what today's binaries write
  mkdir -p "$run"
  if ! "$make" --no-print-directory -C "$root" -j2 -f pipelines/mempo.mk BIN="${BIN:-bin}" RUN_DIR="$run" \
    ITERS=1 VARIANTS=mempo PROMPTS_PER_ITER=2 \
    TASK_FLAGS="--people 40 --cities 12 --companies 12 --countries 4 --train 24 --test 2 --test-k 2,4" \
    INIT_FLAGS="--vocab 600" SFT_FLAGS="--questions 4 --epochs 1 --max-turns 3 --threads 1" \
    ROLLOUT_FLAGS="--n 2 --max-turns 3 --max-new-tokens 16 --threads 1" LOGPROB_FLAGS="--threads 1" \
    UPDATE_FLAGS="--lr 1e-4 --mini-batches 1 --threads 1" STAGE_FLAGS="--progress none --log-level warn" \
    train >"$run/make.log" 2>&1; then
    tail -n 20 "$run/make.log" >&2
    echo "ecosystem: the tiny run failed; log in $run/make.log" >&2
    exit 1
  fi
fi
echo "ecosystem: checking $run with $py"
# transformers without torch warns at import that it can load no model; check.py loads none.
TRANSFORMERS_NO_ADVISORY_WARNINGS=1 "$py" "$here/check.py" "$run"
# OpenAI's Python client against serve-policy on the run's policy (serve_check.py).
bin=${BIN:-bin}
[[ $bin == /* ]] || bin=$root/$bin
"$py" "$here/serve_check.py" "$run" "$bin/mempo"
