#!/usr/bin/env bash
# mempo against PyTorch eager / transformers on the same shapes, dtype and thread counts
# (README, "Speed against PyTorch"): row by row, a Go benchmark and then compare.py's PyTorch side of it, and
# then the markdown ratio table (also written to runs/bench-compare/table.md).
#
#   build/bench_compare/run.sh                 # every row, 3 timed iterations a side
#   ITERS=5 BENCH='ForwardTiny|OldPass' build/bench_compare/run.sh
#
# BENCH is a |-separated list of the Go benchmarks' top-level names (compare.py's
# ROWS); ITERS is the iteration count of both sides (-benchtime ITERSx), after one
# warm-up call.
# PyTorch goes into a virtual environment cached in ~/.cache/mempo/bench-venv
# (MEMPO_CACHE moves it), made once from requirements.txt with a CPython 3.8–3.11
# (PYTHON picks one). Without such a Python, venv or pip, or when the install fails,
# the script says why and exits 0: the comparison is optional.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
ITERS=${ITERS:-3}
BENCH=${BENCH:-ForwardTiny|Forward05BShape2L|LogProbsTiny|OldPass|DecodeTiny|DecodeTiny16|Update05BShape2L|UpdateAdamW05BShape2L|AdamWStep05BShape2L}
cache=${MEMPO_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mempo}
venv=$cache/bench-venv
out=$root/runs/bench-compare

skip() {
  echo "bench-compare: skipped: $*" >&2
  exit 0
}

# python prints the first interpreter torch 2.1.2 has wheels for (CPython 3.8–3.11).
python() {
  local p
  for p in ${PYTHON:-} python3.11 python3.10 python3.9 python3.8 python3; do
    if command -v "$p" >/dev/null 2>&1 &&
      "$p" -c 'import sys; sys.exit(not (3, 8) <= sys.version_info[:2] <= (3, 11))' 2>/dev/null; then
      command -v "$p"
      return
    fi
  done
  return 1
}

if ! cmp -s "$venv/.complete" "$here/requirements.txt" 2>/dev/null; then
  py=$(python) || skip "no CPython 3.8–3.11 found (torch 2.1.2 has wheels for no other); set PYTHON=/path/to/python3.11"
  "$py" -c 'import venv, ensurepip' 2>/dev/null ||
    skip "$py cannot make a virtual environment with pip (install python3-venv)"
  echo "bench-compare: installing torch 2.1.2 and transformers 4.44.2 into $venv (once; about 2.5 GB from PyPI)" >&2
  rm -rf "$venv.tmp"
  mkdir -p "$cache"
  log=$cache/bench-venv.log
  if ! { "$py" -m venv "$venv.tmp" &&
    "$venv.tmp/bin/python" -m pip install --no-cache-dir --progress-bar off -r "$here/requirements.txt"; } >"$log" 2>&1; then
    tail -n 5 "$log" >&2
    rm -rf "$venv.tmp"
    skip "pip could not install $here/requirements.txt (package index unreachable?); log in $log"
  fi
  "$venv.tmp/bin/python" -c 'import torch, transformers' >>"$log" 2>&1 ||
    { tail -n 5 "$log" >&2; rm -rf "$venv.tmp"; skip "torch or transformers does not import; log in $log"; }
  cp "$here/requirements.txt" "$venv.tmp/.complete"
  rm -rf "$venv"
  mv "$venv.tmp" "$venv" # a venv's python runs from anywhere; only bin/ scripts name the path
fi

mkdir -p "$out"
cd "$root"
# Row by row, mempo's benchmark then PyTorch's, so that both sides of a row see about
# the same load from whatever else shares the machine.
rm -f "$out"/go*.txt "$out"/torch*.json
: >"$out/go.txt"
torch_json=()
for row in ${BENCH//|/ }; do
  echo "bench-compare: $row: mempo ($ITERS iterations)" >&2
  log=$out/go-$row.txt
  if ! "$root/build/go.sh" test -run '^$' -bench "^Benchmark${row}\$" -benchtime "${ITERS}x" -timeout 60m \
    ./model/qwen2/ ./stages/logprob/ ./stages/update/ >"$log" 2>&1; then
    cat "$log" >&2
    echo "bench-compare: $row: go test failed" >&2
    exit 1
  fi
  grep '^Benchmark' "$log" | tee -a "$out/go.txt" || { echo "bench-compare: no Go benchmark Benchmark$row" >&2; exit 1; }
  echo "bench-compare: $row: PyTorch" >&2
  "$venv/bin/python" "$here/compare.py" torch --iters "$ITERS" --bench "^${row}/" --out "$out/torch-$row.json"
  torch_json+=(--torch "$out/torch-$row.json")
done
echo
"$venv/bin/python" "$here/compare.py" table --go "$out/go.txt" "${torch_json[@]}" | tee "$out/table.md"
