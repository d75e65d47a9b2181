#!/usr/bin/env bash
# Checks that every make target that runs the tests or benchmarks of every package
# fetches the pinned fixtures first (build/fixtures.sh): model/bpe's tests and
# benchmarks fail without the Qwen3 tokenizer, so a fresh clone's target would too.
# Uses make -n: nothing runs.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
fail=0
for target in test bench; do
  recipes=$(make --no-print-directory -n -C "$root" "$target" 2>&1)
  if grep -q 'build/fixtures.sh' <<<"$recipes"; then
    echo "ok   make $target fetches the fixtures"
  else
    echo "FAIL make $target runs every package's tests or benchmarks without build/fixtures.sh"
    fail=1
  fi
done
exit $fail
