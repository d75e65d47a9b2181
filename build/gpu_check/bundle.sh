#!/usr/bin/env bash
# gpu-check.sh of a GPU bundle (make gpu-bundle, build/gpu_bundle.sh): the GPU check of
# build/gpu_check/run.sh on the bundle's prebuilt binaries, with no Go, no compiler and no
# network. They are built against torch 2.11 with CUDA 13 and load an installed one:
#
#   LIBTORCH=python ./gpu-check.sh          the torch of $PYTHON (default python3), whose
#                                           environment also runs the PyTorch side
#   LIBTORCH=/path/to/torch ./gpu-check.sh  a torch/ directory or libtorch with lib/ and include/
#
# The report goes to $OUT/report.md when OUT is set, else runs/gpu-check/report.md here.
# Every setting of run.sh applies (GPU_CHECK_DEVICE=cpu, GPU_CHECK_SECTIONS, ...).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
die() {
  echo "gpu-check: $*" >&2
  exit 2
}

# The binaries need the glibc of the build machine or later (GLIBC: the newest symbol
# version they use), which an older one would say only as a loader error.
need=$(cat "$here/GLIBC" 2>/dev/null) glibc=$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}')
[[ -z $need || -z $glibc || $(printf '%s\n' "$need" "$glibc" | sort -V | head -1) == "$need" ]] ||
  die "glibc $glibc: these binaries need glibc $need or later; build on this machine instead (make gpu-check)"

[[ -n ${LIBTORCH:-} ]] ||
  die "set LIBTORCH=python (the torch of \$PYTHON, default python3) or LIBTORCH=/path/to/torch: these binaries load an installed torch 2.11 with CUDA 13"
lt=$("$here/build/libtorch.sh") || exit 2
[[ -f $lt/lib/libtorch_cuda.so ]] || die "$lt/lib has no libtorch_cuda.so: a CPU-only torch; these binaries need torch 2.11 with CUDA 13"

# The binaries call torch's C++ API, which changes between releases: only 2.11.x will do.
ver=$("$here/build/libtorch_version.sh" "$lt")
[[ $ver == 2.11.* ]] ||
  die "$lt is torch ${ver:-of unknown version (no version.h)}; these binaries are built against torch 2.11: install torch==2.11.* (CUDA 13), or build from source on this machine (make gpu-check)"

# The PyTorch side runs in the Python environment whose torch the binaries load.
if [[ $LIBTORCH == python && -z ${GPU_CHECK_PYTHON:-} ]]; then
  export GPU_CHECK_PYTHON=${PYTHON:-python3}
fi
# Their RUNPATH names the build machine's cache; LD_LIBRARY_PATH comes first.
export LIBTORCH=$lt LD_LIBRARY_PATH=$lt/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export GPU_CHECK_PREBUILT=$here
echo "gpu-check: prebuilt mempo $(cat "$here/REVISION") on torch $ver in $lt" >&2
exec "$here/build/gpu_check/run.sh" "$@"
