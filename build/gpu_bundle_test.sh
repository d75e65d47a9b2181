#!/usr/bin/env bash
# Checks a GPU bundle (make gpu-bundle) as a GPU machine would use it, on any machine:
# its size and listing, then, unpacked in a scratch directory with Go off PATH, that
# gpu-check.sh refuses a torch that is not a CUDA 2.11, that the binaries load a CUDA
# torch 2.11 through LD_LIBRARY_PATH (their RUNPATH gives way to it) and that a stage
# with --device cuda and every GPU hidden stops with the no-device error.
# GPU_BUNDLE_TEST_FULL=1 then runs GPU_CHECK_DEVICE=cpu ./gpu-check.sh end to end
# (about 5 minutes on 2 cores). The torch is PYTHON's (default: the bench venv's).
#
#   build/gpu_bundle_test.sh [BUNDLE.tar.xz]   (default: the newest in runs/gpu-bundle)
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tarball=${1:-$(ls -t "$root"/runs/gpu-bundle/mempo-gpu-*.tar.xz 2>/dev/null | head -1)}
[[ -f $tarball ]] || { echo "FAIL no bundle; run make gpu-bundle"; exit 1; }
tarball=$(cd "$(dirname "$tarball")" && pwd)/$(basename "$tarball")
PY=${PYTHON:-${MEMPO_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mempo}/bench-venv/bin/python}
fail=0
ok() { echo "ok   $*"; }
bad() {
  echo "FAIL $*"
  fail=1
}

size=$(stat -c %s "$tarball")
if ((size <= 48 << 20)); then ok "$(basename "$tarball"): $size bytes"; else bad "$tarball: $size bytes, over 48 MiB"; fi

list=$(tar -tvJf "$tarball")
name=$(basename "$tarball" .tar.xz)
for f in gpu-check.sh REVISION GLIBC bin/mempo bin/CODE_VERSION tests/qwen2.test tests/train.test tests/update.test \
  build/gpu_check/run.sh build/gpu_check/sections.sh build/gpu_check/report.sh build/libtorch.sh build/libtorch_version.sh \
  build/check_cuda_build.sh build/bench_compare/compare.py pipelines/demo.mk pipelines/mempo.mk pipelines/rl.mk \
  pipelines/embedded.mk pipelines/demo-protocol.json; do
  grep -q " $name/$f\$" <<<"$list" || bad "the bundle has no $f"
done
for s in rollout score logprob advantage update; do
  grep -q " $name/bin/mempo-$s -> mempo\$" <<<"$list" || bad "bin/mempo-$s is not a symlink to mempo"
done
# Nothing the bundle can generate (runs, models, tasks) and no sources.
extra=$(grep -vE " $name/(gpu-check.sh|REVISION|GLIBC|bin/.*|tests/.*|build/.*|pipelines/.*|)\$" <<<"$list")
[[ -z $extra ]] || bad "unexpected entries: $extra"
ok "listing: $(wc -l <<<"$list") entries"

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
tar -C "$scratch" -xJf "$tarball" || { bad "tar -xJf failed"; exit 1; }
b=$scratch/$name
if readelf -d "$b/bin/mempo" | grep -q '(RUNPATH)' && ! readelf -d "$b/bin/mempo" | grep -q '(RPATH)'; then
  ok "bin/mempo has a RUNPATH, which LD_LIBRARY_PATH overrides"
else
  bad "bin/mempo: want a RUNPATH and no RPATH: $(readelf -d "$b/bin/mempo" | grep -i path)"
fi

# A plain PATH, as on a GPU machine without Go.
export PATH=/usr/bin:/bin
unset LIBTORCH LD_LIBRARY_PATH GOROOT GOPATH
if command -v go >/dev/null; then bad "go is still on PATH=$PATH: $(command -v go)"; else ok "no go on PATH=$PATH"; fi

# refuses DIR WANT: gpu-check.sh with LIBTORCH=DIR exits 2 saying WANT.
refuses() {
  local err
  err=$(cd "$b" && LIBTORCH=$1 ./gpu-check.sh 2>&1)
  if [[ $? == 2 && $err == *"$2"* ]]; then ok "refuses $1: $err"; else bad "LIBTORCH=$1: want exit 2 and '$2', got: $err"; fi
}
fake=$scratch/torch-2.15
mkdir -p "$fake/include/torch/headeronly" "$fake/lib"
printf '#define TORCH_VERSION_MAJOR 2\n#define TORCH_VERSION_MINOR 15\n#define TORCH_VERSION_PATCH 0\n' >"$fake/include/torch/headeronly/version.h"
touch "$fake/lib/libc10.so" "$fake/lib/libtorch_cuda.so"
refuses "$fake" "built against torch 2.11"
cpu=$scratch/torch-cpu
mkdir -p "$cpu/include/torch" "$cpu/lib" && touch "$cpu/lib/libc10.so"
refuses "$cpu" "a CPU-only torch"

lt=$(LIBTORCH=python PYTHON=$PY "$b/build/libtorch.sh") || { bad "no torch in $PY (set PYTHON)"; exit 1; }
# The libtorch and build sections: the binaries load that torch, the no-device error.
if (cd "$b" && LIBTORCH=python PYTHON=$PY OUT=$scratch/out GPU_CHECK_DEVICE=cpu GPU_CHECK_SECTIONS="libtorch build" ./gpu-check.sh); then
  ok "gpu-check.sh libtorch build: $(grep '^| build' "$scratch/out/report.md")"
else
  bad "gpu-check.sh libtorch build: $(cat "$scratch/out/report.md" "$scratch/out/gpu-check-logs/build.log" 2>/dev/null)"
fi
err=$(cd "$scratch" && CUDA_VISIBLE_DEVICES= LD_LIBRARY_PATH=$lt/lib "$b/bin/mempo-rollout" --prompts p --policy c --out o --device cuda 2>&1)
if [[ $? == 1 && $err == *"no CUDA device is visible"* ]]; then ok "mempo-rollout --device cuda, GPUs hidden: $err"; else bad "mempo-rollout --device cuda: $err"; fi

if [[ ${GPU_BUNDLE_TEST_FULL:-0} == 1 ]]; then
  if (cd "$b" && LIBTORCH=python PYTHON=$PY OUT=$scratch/full GPU_CHECK_DEVICE=cpu ./gpu-check.sh); then
    ok "GPU_CHECK_DEVICE=cpu ./gpu-check.sh: every section passed or skipped"
  else
    bad "GPU_CHECK_DEVICE=cpu ./gpu-check.sh failed"
  fi
  sed -n '/^| section/,/^$/p' "$scratch/full/report.md"
  cp "$scratch/full/report.md" "$root/runs/gpu-bundle/cpu-report.md" 2>/dev/null || true
fi
exit $fail
