#!/usr/bin/env bash
# make gpu-bundle: everything the GPU check needs on a machine with no Go, no compiler and
# no network, as one compressed tarball (runs/gpu-bundle/mempo-gpu-<revision>.tar.xz,
# at most 48 MiB). Unpacked there, `LIBTORCH=python ./gpu-check.sh` runs the check
# (build/gpu_check/bundle.sh) on a torch 2.11 with CUDA 13 installed in a Python env.
#
#   bin/      mempo built against the pinned torch 2.11.0 wheel's CUDA libraries (the
#             LIBTORCH_CUDA=1 link kit), the stage names as symlinks to it, CODE_VERSION
#   tests/    the test binaries of the parity tests and benchmarks (model/qwen2, train,
#             stages/update) and of the CUDA collectives (train/collective: NCCL)
#   build/    the check's scripts, build/libtorch.sh, check_cuda_build.sh, compare.py
#   pipelines/ the make files and protocol of the demo iteration
#   gpu-check.sh, REVISION, GLIBC (the oldest glibc the binaries run on)
#
# Nothing the bundle can make there goes in: the task, the index and the models of the
# demo iteration are made by its own commands. Binaries are stripped (-s -w) and the
# tarball is xz -9, which any tar on Linux unpacks.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
LIMIT=$((48 << 20))

rev=$(git rev-parse --short=12 HEAD)$(git diff --quiet HEAD || echo -dirty)
name=mempo-gpu-$rev
out=${GPU_BUNDLE_OUT:-$root/runs/gpu-bundle}
# Always the pinned 2.11.0 wheel's kit: gpu-check.sh refuses any torch but 2.11.x.
unset LIBTORCH LIBTORCH_VERSION
export LIBTORCH_CUDA=1

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
d=$tmp/$name
mkdir -p "$d/bin" "$d/tests" "$d/build/gpu_check" "$d/build/bench_compare" "$d/pipelines"

echo "gpu-bundle: building mempo and the test binaries against $(build/libtorch.sh)" >&2
build/go.sh build -ldflags "-w -s -X github.com/mempo/mempo/jobs.revision=$rev" -o "$d/bin/mempo" ./cmd/mempo
for s in rollout score logprob advantage update; do
  ln -s mempo "$d/bin/mempo-$s"
done
echo "$rev" >"$d/bin/CODE_VERSION" # pipelines/mempo.mk's prerequisite of every stage
build/go.sh test -c -vet=off -ldflags "-w -s" -o "$d/tests/" ./model/qwen2/ ./train/ ./stages/update/ ./train/collective/

cp build/gpu_check/bundle.sh "$d/gpu-check.sh"
cp build/gpu_check/run.sh build/gpu_check/sections.sh build/gpu_check/report.sh "$d/build/gpu_check/"
cp build/libtorch.sh build/libtorch_version.sh build/check_cuda_build.sh "$d/build/"
cp build/bench_compare/compare.py "$d/build/bench_compare/"
cp pipelines/demo.mk pipelines/embedded.mk pipelines/mempo.mk pipelines/rl.mk pipelines/demo-protocol.json "$d/pipelines/"
echo "$rev" >"$d/REVISION"
# The newest glibc symbol version the binaries need, which gpu-check.sh checks first.
objdump -T "$d/bin/mempo" "$d"/tests/*.test | grep -oE 'GLIBC_[0-9.]+' | sed 's/GLIBC_//' | sort -Vu | tail -1 >"$d/GLIBC"

mkdir -p "$out"
tarball=$out/$name.tar.xz
echo "gpu-bundle: compressing (xz -9)" >&2
tar -C "$tmp" --owner=0 --group=0 -cf - "$name" | xz -9 -T1 >"$tarball.part"
mv "$tarball.part" "$tarball"

echo "gpu-bundle: pieces, uncompressed:"
(cd "$d" && find . -type f -printf "%s %P\n" | sort -k2 | awk '{printf "  %10d  %s\n", $1, $2}')
size=$(stat -c %s "$tarball")
echo "gpu-bundle: $tarball: $size bytes ($((size >> 20)) MiB; limit 48 MiB)"
((size <= LIMIT)) || { echo "gpu-bundle: over the 48 MiB limit" >&2; exit 1; }
