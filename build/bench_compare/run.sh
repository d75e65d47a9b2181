#!/usr/bin/env bash
# mempo against PyTorch eager / transformers on the same shapes, dtype and thread counts
# (README, "Speed against PyTorch"): row by row, a Go benchmark and then compare.py's PyTorch side of it, and
# then the markdown ratio table (also written to runs/bench-compare/table.md).
#
#   build/bench_compare/run.sh                 # every row, 3 timed iterations a side
#   ITERS=5 BENCH='ForwardTiny|OldPass' build/bench_compare/run.sh
#   DTYPE=bfloat16 build/bench_compare/run.sh  # both sides in bfloat16 (table-bfloat16.md)
#
# BENCH is a |-separated list of the Go benchmarks' top-level names (compare.py's
# ROWS); ITERS is the iteration count of both sides (-benchtime ITERSx), after one
# warm-up call. DTYPE (float32 unless set) is the weights' and activations' precision
# of both sides: MEMPO_TEST_DTYPE for the Go benchmarks, --dtype for compare.py.
# PyTorch goes into the virtual environment of venv.sh, cached in
# ~/.cache/mempo/bench-venv (MEMPO_CACHE moves it), made once from requirements.txt with
# a CPython 3.8–3.11 (PYTHON picks one). Without such a Python, venv or pip, or when the
# install fails, the script says why and exits 0: the comparison is optional.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
ITERS=${ITERS:-3}
BENCH=${BENCH:-ForwardTiny|Forward05BShape2L|LogProbsTiny|OldPass|OldPass05BShape2L|DecodeTiny|DecodeTiny16|Update05BShape2L|UpdateAdamW05BShape2L|AdamWStep05BShape2L}
DTYPE=${DTYPE:-float32}
out=$root/runs/bench-compare
table=$out/table.md
[ "$DTYPE" = float32 ] || table=$out/table-$DTYPE.md

skip() {
  echo "bench-compare: skipped: $*" >&2
  exit 0
}

# shellcheck source=venv.sh
. "$here/venv.sh"
venv_install || skip "no PyTorch environment (the line above says why)"

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
  if ! MEMPO_TEST_DTYPE=$DTYPE "$root/build/go.sh" test -run '^$' -bench "^Benchmark${row}\$" -benchtime "${ITERS}x" -timeout 60m \
    ./model/qwen2/ ./stages/logprob/ ./stages/update/ >"$log" 2>&1; then
    cat "$log" >&2
    echo "bench-compare: $row: go test failed" >&2
    exit 1
  fi
  grep '^Benchmark' "$log" | tee -a "$out/go.txt" || { echo "bench-compare: no Go benchmark Benchmark$row" >&2; exit 1; }
  echo "bench-compare: $row: PyTorch" >&2
  "$venv/bin/python" "$here/compare.py" torch --iters "$ITERS" --dtype "$DTYPE" --bench "^${row}/" --out "$out/torch-$row.json"
  torch_json+=(--torch "$out/torch-$row.json")
done
echo
"$venv/bin/python" "$here/compare.py" table --go "$out/go.txt" "${torch_json[@]}" | tee "$table"
