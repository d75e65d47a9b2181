#!/usr/bin/env bash
# Compares the demo's table (the first table of RESULTS, runs/demo/eval/results.md) with
# the one README holds between its demo-table markers, and says plainly whether they are
# equal; it never fails the run that calls it (make demo). --write puts RESULTS' table into
# README instead, after a re-measured demo.
#   build/demo_table.sh [--write] RESULTS README
set -euo pipefail
write=0
if [[ ${1:-} == --write ]]; then write=1; shift; fi
results=${1:?usage: build/demo_table.sh [--write] RESULTS README}
readme=${2:?usage: build/demo_table.sh [--write] RESULTS README}
open='<!-- demo-table'
close='<!-- /demo-table -->'

if ! grep -q "^$open" "$readme" || ! grep -qF "$close" "$readme"; then
  echo "demo table: $readme has no demo-table markers; nothing to compare" >&2
  exit 0
fi
if [[ ! -s $results ]]; then
  echo "demo table: $results not found; run make demo first" >&2
  exit 0
fi
# The first table: from its first |-line to the line before the next non-table line.
measured=$(awk '/^\|/ {t=1; print; next} t {exit}' "$results")
held=$(awk -v o="$open" -v c="$close" 'index($0, c) == 1 {exit} f {print} index($0, o) == 1 {f=1}' "$readme")

if ((write)); then
  tmp=$(mktemp "$readme.XXXXXX")
  awk -v o="$open" -v c="$close" -v table="$measured" '
    index($0, c) == 1 {print table; skip=0}
    skip {next}
    {print}
    index($0, o) == 1 {skip=1}' "$readme" >"$tmp"
  mv "$tmp" "$readme"
  echo "demo table: wrote $results' table into $readme"
  exit 0
fi
if [[ $measured == "$held" ]]; then
  echo "demo table: equal to $readme's"
else
  echo "demo table: DIFFERS from $readme's (its rows were measured on another revision, machine or libtorch):"
  diff <(printf '%s\n' "$held") <(printf '%s\n' "$measured") | sed 's/^/  /' || true
  echo "  (build/demo_table.sh --write $results $readme updates the README)"
fi
