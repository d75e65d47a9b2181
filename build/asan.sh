#!/usr/bin/env bash
# Runs a mempo binary, or a package's tests, built with AddressSanitizer, to find a
# tensor handle or buffer used after it was freed, or freed twice. libtorch itself is
# not instrumented, but every malloc and free in the process goes through ASan's
# allocator, which keeps freed memory out of reuse for a while (its quarantine) and
# writes its own bookkeeping into it: a call through a freed handle crashes at that
# call (an ASan SEGV report in libtorch) instead of reading someone else's tensor and
# corrupting the heap for later, and a double free is reported where it happens.
#
#   build/asan.sh mempo eval --task … --policy …     # builds bin/asan/, runs bin/asan/mempo
#   build/asan.sh test ./model/qwen2 -test.run TestGenerateUnderCollector  # test binary flags
#
# gotch's generated ops (ts/tensor-generated.go) read each result handle from a
# malloc(0) slot, which ASan reports as an overflow on every call; glibc's malloc(0)
# gives 24 usable bytes, so under a normal build the 8-byte handle fits. mempo's hot
# paths call libtch directly (model/torch/ops.go) and only model loading and a few
# once-per-run ops go through those wrappers. The run continues past such reports
# (halt_on_error=0), and this script exits 1 when any other report appears, listing
# them. The full log is in $ASAN_LOG (default bin/asan/asan.log). The build takes a
# few minutes; the run is 2-3× slower than a normal one.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
[[ $# -ge 1 ]] || { sed -n '2,20p' "$0" >&2; exit 2; }
export ASAN_OPTIONS=${ASAN_OPTIONS:-halt_on_error=0:detect_leaks=0}
out=bin/asan
log=${ASAN_LOG:-$out/asan.log}
mkdir -p "$out"

status=0
if [[ $1 == test ]]; then
  # The test binary is kept (go test -c) so that ASan can symbolize its reports, and
  # runs in its package's directory as go test would run it.
  pkg=${2:?build/asan.sh test needs a package, e.g. ./model/qwen2}
  shift 2
  bin="$root/$out/$(basename "$pkg").test"
  build/go.sh test -c -asan -o "$bin" "$pkg"
  (cd "$pkg" && "$bin" -test.v "$@") 2>&1 | tee "$log" || status=$?
else
  build/go.sh build -asan -o "$out/" ./cmd/...
  cmd=$1
  shift
  "$out/$cmd" "$@" 2> >(tee "$log" >&2) || status=$?
  wait
fi

others=$(grep '^SUMMARY: AddressSanitizer' "$log" | grep -v 'gotch@[^/]*/ts/tensor-generated\.go' || true)
known=$(grep -c '^SUMMARY: AddressSanitizer.*gotch@[^/]*/ts/tensor-generated\.go' "$log" || true)
echo "asan: $known report(s) of gotch's malloc(0) result slots (see the top of build/asan.sh)" >&2
if [[ -n $others ]]; then
  echo "asan: other reports (full log: $log):" >&2
  echo "$others" | sort | uniq -c >&2
  exit 1
fi
exit "$status"
