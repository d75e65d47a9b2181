#!/usr/bin/env bash
# The C++ compiler cgo runs when build/go.sh builds against a libtorch whose headers need a
# newer standard than gotch's cgo directive (-std=c++17): $LIBTORCH_CXX with each -std=c++17
# replaced by -std=$LIBTORCH_CXX_STD. Every other argument passes through unchanged.
args=()
for a in "$@"; do
  [[ $a == -std=c++17 ]] && a=-std=$LIBTORCH_CXX_STD
  args+=("$a")
done
exec ${LIBTORCH_CXX:-g++} "${args[@]}"
