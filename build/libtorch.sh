#!/usr/bin/env bash
# Print the libtorch directory (include/ and lib/) that build/go.sh builds against.
#
#   LIBTORCH unset    the pinned torch==2.11.0 wheel's libtorch, fetched once into a cache
#                     directory shared by every clone (LIBTORCH_VERSION=2.15.0 picks the other
#                     pinned release, for make check-libtorch)
#   LIBTORCH=python   the torch/ directory of the torch package of $PYTHON (default python3):
#                     the libtorch the user's own PyTorch runs on, CUDA build or not
#   LIBTORCH=/path    any libtorch 2.x install: an unpacked libtorch zip or a torch/ directory
#
# PyPI's Linux torch wheels are the CUDA builds and carry a complete libtorch. Default, CPU:
# we keep the CPU parts (libtorch_cpu, libc10, the bundled libgomp, the headers).
# libtorch_cpu.so also NEEDs libcudart.so.13 and libcupti.so.13, which load fine on a machine
# without a GPU; they come from NVIDIA's pinned wheels of the CUDA toolkit the wheel names.
# go.sh adds link-time stand-ins for the CUDA libraries gotch's cgo directives name.
#
# LIBTORCH_CUDA=1: also the wheel's own CUDA libraries (libtorch, libtorch_cuda, libc10_cuda),
# enough to link binaries that run on a GPU machine's torch 2.11 with CUDA 13 (its cuDNN,
# cuBLAS, NCCL... come from that install at run time; build/gpu_bundle.sh). About 1 GB on disk.
set -euo pipefail

die() { echo "libtorch: $*" >&2; exit 1; }
PY=${PYTHON:-python3}

case ${LIBTORCH:-} in
  "") ;;
  python)
    command -v "$PY" >/dev/null || die "LIBTORCH=python: $PY not found; set PYTHON=/path/to/python"
    dir=$("$PY" -c 'import importlib.util as u, sys
s = u.find_spec("torch")
sys.exit(1) if s is None else print(s.submodule_search_locations[0])' 2>/dev/null) ||
      die "LIBTORCH=python: $PY has no torch package (pip install torch, or set PYTHON=/path/to/python)"
    [[ -d $dir/include/torch && -f $dir/lib/libc10.so ]] ||
      die "LIBTORCH=python: $dir has no include/torch or lib/libc10.so (a torch package without its C++ headers?)"
    echo "$dir"
    exit 0
    ;;
  *)
    [[ -d $LIBTORCH/include/torch && -f $LIBTORCH/lib/libc10.so ]] ||
      die "LIBTORCH=$LIBTORCH has no include/torch or lib/libc10.so; point it at a libtorch 2.x install (or LIBTORCH=python)"
    echo "$LIBTORCH"
    exit 0
    ;;
esac

VERSION=${LIBTORCH_VERSION:-2.11.0}
CACHE_ROOT=${MEMPO_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mempo}

# name==version  wheel file  sha256 (PyPI's published digests), for each pinned release: the
# torch wheel, then the CUDA runtime and CUPTI wheels of the CUDA toolkit its METADATA names.
case $VERSION in
  2.11.0)
    TORCH="torch==2.11.0 torch-2.11.0-cp311-cp311-manylinux_2_28_x86_64.whl 7aa2f9bbc6d4595ba72138026b2074be1233186150e9292865e04b7a63b8c67a"
    RUNTIME_WHEELS=(
      "nvidia-cuda-runtime==13.0.96 nvidia_cuda_runtime-13.0.96-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl 7f82250d7782aa23b6cfe765ecc7db554bd3c2870c43f3d1821f1d18aebf0548"
      "nvidia-cuda-cupti==13.0.85 nvidia_cuda_cupti-13.0.85-py3-none-manylinux_2_25_x86_64.whl 4eb01c08e859bf924d222250d2e8f8b8ff6d3db4721288cf35d14252a4d933c8"
    ) ;;
  2.15.0)
    TORCH="torch==2.15.0 torch-2.15.0-cp311-cp311-manylinux_2_28_x86_64.whl 48c2d861134c0b5697c7602cb5ffa68f62a2989fdcd1717e593356f67996ca1e"
    RUNTIME_WHEELS=(
      "nvidia-cuda-runtime==13.2.86 nvidia_cuda_runtime-13.2.86-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl 3498247680dfddce31bad102af7e3e26fc795342a3cac64722bb0fa95e7f60f0"
      "nvidia-cuda-cupti==13.2.86 nvidia_cuda_cupti-13.2.86-py3-none-manylinux_2_25_x86_64.whl 8fa29f15dd8336181f961764d9d95236fc6b931dd0c8fcf8cd70aab0c310b586"
    ) ;;
  *) die "LIBTORCH_VERSION=$VERSION is not pinned here (2.11.0, 2.15.0); for another release set LIBTORCH=/path or LIBTORCH=python" ;;
esac

case ${LIBTORCH_CUDA:-0} in
  0) CUDA=0 DEST=$CACHE_ROOT/libtorch-$VERSION ;;
  1) CUDA=1 DEST=$CACHE_ROOT/libtorch-$VERSION-cu13 ;;
  *) die "LIBTORCH_CUDA=$LIBTORCH_CUDA: want 0 (CPU build) or 1 (CUDA build)" ;;
esac

# The torch wheel's libraries each build keeps.
CPU_LIBS=(libtorch_cpu.so libc10.so libgomp.so.1)
CUDA_LIBS=("${CPU_LIBS[@]}" libtorch.so libtorch_cuda.so libc10_cuda.so)

if [[ -f $DEST/.complete ]]; then
  echo "$DEST"
  exit 0
fi

[[ $(uname -s)-$(uname -m) == Linux-x86_64 ]] ||
  die "the pinned wheels are for Linux x86-64; set LIBTORCH=/path/to/libtorch (or LIBTORCH=python) on $(uname -s)-$(uname -m)"
command -v "$PY" >/dev/null || die "$PY not found; install python3 with pip, or set LIBTORCH=/path/to/libtorch"
"$PY" -m pip --version >/dev/null 2>&1 || die "'$PY -m pip' is not available; install pip, or set LIBTORCH=/path/to/libtorch"
for tool in unzip sha256sum; do
  command -v $tool >/dev/null || die "$tool not found; install it (Debian: apt-get install unzip coreutils)"
done

wheels=("$TORCH" "${RUNTIME_WHEELS[@]}")
libs=("${CPU_LIBS[@]}")
((CUDA)) && libs=("${CUDA_LIBS[@]}")

mkdir -p "$CACHE_ROOT"
WORK=$(mktemp -d "$CACHE_ROOT/.fetch-XXXXXX")
trap 'rm -rf "$WORK"' EXIT

# Verified wheels stay in $DL until the install is complete, so an interrupted fetch does
# not download them again.
DL=$CACHE_ROOT/.wheels
mkdir -p "$DL"
sha() { sha256sum "$1" | cut -d' ' -f1; }
for w in "${wheels[@]}"; do
  read -r req file sum <<<"$w"
  if [[ -f $DL/$file && $(sha "$DL/$file") == "$sum" ]]; then
    continue
  fi
  rm -f "$DL/$file"
  echo "libtorch: downloading $req (once; cached in $CACHE_ROOT)" >&2
  if ! "$PY" -m pip download --quiet --no-deps --only-binary=:all: \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_25_x86_64 --platform manylinux_2_17_x86_64 \
      --platform manylinux2014_x86_64 --python-version 3.11 --implementation cp --abi cp311 \
      -d "$WORK/wheels" "$req" >"$WORK/pip.log" 2>&1; then
    tail -n 5 "$WORK/pip.log" >&2
    die "pip download $req failed (network or package index unreachable?); or set LIBTORCH=/path/to/libtorch"
  fi
  [[ -f $WORK/wheels/$file ]] || die "pip download $req did not produce $file"
  got=$(sha "$WORK/wheels/$file")
  [[ $got == "$sum" ]] || die "$file: sha256 $got, want $sum: checksum mismatch (corrupt download or a changed package)"
  mv "$WORK/wheels/$file" "$DL/$file"
done

OUT=$WORK/libtorch
mkdir -p "$OUT/lib"
echo "libtorch: extracting into $DEST" >&2
read -r _ torch_whl _ <<<"$TORCH"
unzip -q "$DL/$torch_whl" 'torch/include/*' "${libs[@]/#/torch/lib/}" -d "$WORK/x"
mv "$WORK/x/torch/include" "$OUT/include"
mv "$WORK/x/torch/lib/"* "$OUT/lib/"
for w in "${RUNTIME_WHEELS[@]}"; do
  read -r _ file _ <<<"$w"
  unzip -q -j "$DL/$file" 'nvidia/cu13/lib/libcudart.so.13' 'nvidia/cu13/lib/libcupti.so.13' -d "$OUT/lib" 2>/dev/null ||
    [[ $? == 11 ]] || die "$file: unzip failed"
done
for so in libcudart.so.13 libcupti.so.13; do
  [[ -f $OUT/lib/$so ]] || die "no wheel provided $so"
done
if ((CUDA)); then echo "$VERSION cu13" >"$OUT/.complete"; else echo "$VERSION" >"$OUT/.complete"; fi

rm -rf "$DEST"
mv "$OUT" "$DEST"
for w in "${wheels[@]}"; do
  read -r _ file _ <<<"$w"
  rm -f "$DL/$file"
done
rmdir "$DL" 2>/dev/null || true
echo "libtorch: ready in $DEST" >&2
echo "$DEST"
