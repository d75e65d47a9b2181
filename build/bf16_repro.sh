#!/usr/bin/env bash
# The reproducer of libtorch 2.1.2's bfloat16 defect on CPUs with AVX512-BF16 (README,
# known issues): RUNS (default 10) runs of TestConcurrentBFloat16Products with STEPS
# (default 400) steps per thread, each in a process of its own so a crash counts as one
# failed run. Prints one line per run and the counts; exits 1 if any run failed. It needs
# a CPU that multiplies bfloat16 natively to mean anything, and says so elsewhere.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
runs=${RUNS:-10} steps=${STEPS:-400}
grep -qwE 'avx512_bf16|amx_bf16' /proc/cpuinfo 2>/dev/null ||
  echo "note: this CPU has neither AVX512-BF16 nor AMX-BF16; the defect showed only on such CPUs"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$here/.." && "$here/go.sh" test -c -o "$tmp/torch.test" ./model/torch) || exit 1
pass=0 fail=0
for i in $(seq 1 "$runs"); do
  if out=$(MEMPO_BF16_STRESS_STEPS=$steps "$tmp/torch.test" -test.run '^TestConcurrentBFloat16Products$' -test.count=1 2>&1); then
    pass=$((pass + 1)); echo "run $i: ok"
  else
    fail=$((fail + 1)); echo "run $i: FAILED: $(grep -m1 -E 'differ|SIGSEGV|panic|error' <<<"$out")"
  fi
done
echo "bfloat16 concurrency reproducer ($steps steps x 2 threads): $pass passed, $fail failed"
((fail == 0))
