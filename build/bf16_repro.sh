#!/usr/bin/env bash
# The reproducers of libtorch 2.1.2's bfloat16 defect on CPUs with AVX512-BF16 (README,
# known issues), each run RUNS times (default 10), each run a process of its own so that
# a crash counts as one failed run. Prints a line per run and the counts; exits 1 if any
# run failed. Only a CPU that multiplies bfloat16 natively can show the defect.
#
#   build/bf16_repro.sh threads
#       TestConcurrentBFloat16Training (train/) at STEPS (default 300) SFT steps on each of
#       two single-threaded workers at once: every step's loss and gradients must equal the
#       same step computed alone. Against libtorch 2.1.2 one run in three crashed.
#   build/bf16_repro.sh eval POLICY TASK INDEX
#       `mempo eval` of checkpoint POLICY in bfloat16, one process, on LIMIT (default 64)
#       questions of TASK's K = 2 then K = 4 test sets (TASK/prompts-test-k2, -k4) with the
#       BM25 index INDEX, greedy: every run must write the same rollouts, byte for byte
#       (the defect's runs crashed or each wrote different bytes). BIN (default bin) holds
#       the binaries; make build first.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
runs=${RUNS:-10}
grep -qwE 'avx512_bf16|amx_bf16' /proc/cpuinfo 2>/dev/null ||
  echo "note: this CPU has neither AVX512-BF16 nor AMX-BF16; the defect showed only on such CPUs"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# tally NAME: runs once_NAME RUNS times and prints the counts.
tally() {
  local pass=0 fail=0 i out
  for i in $(seq 1 "$runs"); do
    if out=$("once_$1" "$i" 2>&1); then
      pass=$((pass + 1)); echo "run $i: ok"
    else
      fail=$((fail + 1)); echo "run $i: FAILED: $(grep -m1 -E 'differ|SIGSEGV|panic|error|fatal' <<<"$out" || tail -n1 <<<"$out")"
    fi
  done
  echo "bfloat16 reproducer '$1': $pass passed, $fail failed"
  ((fail == 0))
}

once_threads() {
  (cd "$root/train" && MEMPO_BF16_STRESS_STEPS=${STEPS:-300} "$tmp/train.test" -test.run '^TestConcurrentBFloat16Training$' -test.count=1)
}

# once_eval writes run $1's rollouts and compares their digests with run 1's.
once_eval() {
  local out=$tmp/eval-$1
  "${BIN:-$root/bin}/mempo" eval --index "$INDEX" --test 2="$TASK/prompts-test-k2" --test 4="$TASK/prompts-test-k4" \
    --policy p="$POLICY" --limit "${LIMIT:-64}" --max-turns 8 --max-new-tokens 64 --threads 1 --dtype bfloat16 \
    --no-report --progress none --log-level error --out "$out" || return 1
  find "$out" -name '*.parquet' -path '*rollouts*' | sort | xargs sha256sum | sed "s|$out||" >"$out.sums"
  [[ -s $out.sums ]] || { echo "error: no rollouts written under $out"; return 1; }
  [[ $1 == 1 ]] && return 0
  cmp -s "$tmp/eval-1.sums" "$out.sums" || { echo "rollouts differ from run 1's"; return 1; }
}

case ${1:-} in
  threads)
    (cd "$root" && "$here/go.sh" test -c -o "$tmp/train.test" ./train) || exit 1
    tally threads ;;
  eval)
    [[ $# == 4 ]] || { echo "usage: $0 eval POLICY TASK INDEX" >&2; exit 2; }
    POLICY=$2 TASK=$3 INDEX=$4
    tally eval ;;
  *) echo "usage: $0 threads | eval POLICY TASK INDEX" >&2; exit 2 ;;
esac
