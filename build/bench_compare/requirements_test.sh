#!/usr/bin/env bash
# Checks that every line of requirements.txt is a comment, blank, or a pinned
# requirement pip can parse (name, then version clauses such as ==2.1.2 or <2). A
# stray line makes pip refuse the whole file, and venv.sh then skips bench-compare
# with pip's error, which is easy to miss. Touches no network.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
clause='(==|!=|<=|>=|~=|<|>)[[:space:]]*[A-Za-z0-9.*+!]+'
want="^[A-Za-z0-9][A-Za-z0-9._-]*[[:space:]]*${clause}([[:space:]]*,[[:space:]]*${clause})*[[:space:]]*$"
fail=0 n=0
while IFS= read -r line || [[ -n $line ]]; do
  n=$((n + 1))
  [[ -z ${line//[[:space:]]/} || $line =~ ^[[:space:]]*# ]] && continue
  [[ $line =~ $want ]] || { echo "FAIL requirements.txt:$n is not a pinned requirement: $line"; fail=1; }
done <"$here/requirements.txt"
[[ $fail == 0 ]] && echo "ok   requirements.txt: every requirement line parses"
exit $fail
