#!/usr/bin/env bash
# Fetch the pinned libtorch 2.1.2 that gotch v0.9.1 is generated against, once, into a
# cache directory shared by every clone; print that directory on stdout.
#
# PyPI's torch wheels carry a complete libtorch. We take the CPU parts (libtorch_cpu,
# libc10, their bundled libgomp and the headers). libtorch_cpu.so of the CUDA wheel also
# NEEDs libcudart.so.12 and libcupti.so.12, which load fine on machines without a GPU,
# so they come from NVIDIA's own pinned wheels. go.sh adds the link-time stand-ins for
# the CUDA libraries gotch's cgo directives name.
set -euo pipefail

VERSION=2.1.2
CACHE_ROOT=${MEMPO_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mempo}
DEST=$CACHE_ROOT/libtorch-$VERSION

# name==version  wheel file  sha256
WHEELS=(
  "torch==2.1.2 torch-2.1.2-cp311-cp311-manylinux1_x86_64.whl a6ebbe517097ef289cc7952783588c72de071d4b15ce0f8b285093f0916b1162"
  "nvidia-cuda-runtime-cu12==12.1.105 nvidia_cuda_runtime_cu12-12.1.105-py3-none-manylinux1_x86_64.whl 6e258468ddf5796e25f1dc591a31029fa317d97a0a94ed93468fc86301d61e40"
  "nvidia-cuda-cupti-cu12==12.1.105 nvidia_cuda_cupti_cu12-12.1.105-py3-none-manylinux1_x86_64.whl e54fde3983165c624cb79254ae9818a456eb6e87a7fd4d56a2352c24ee542d7e"
)

die() { echo "libtorch: $*" >&2; exit 1; }

if [[ -f $DEST/.complete ]]; then
  echo "$DEST"
  exit 0
fi

[[ $(uname -s)-$(uname -m) == Linux-x86_64 ]] ||
  die "the pinned wheels are for Linux x86-64; set LIBTORCH=/path/to/libtorch-2.1 on $(uname -s)-$(uname -m)"
PY=${PYTHON:-python3}
command -v "$PY" >/dev/null || die "$PY not found; install python3 with pip, or set LIBTORCH=/path/to/libtorch-2.1"
"$PY" -m pip --version >/dev/null 2>&1 || die "'$PY -m pip' is not available; install pip, or set LIBTORCH=/path/to/libtorch-2.1"
for tool in unzip sha256sum; do
  command -v $tool >/dev/null || die "$tool not found; install it (Debian: apt-get install unzip coreutils)"
done

mkdir -p "$CACHE_ROOT"
WORK=$(mktemp -d "$CACHE_ROOT/.fetch-XXXXXX")
trap 'rm -rf "$WORK"' EXIT

for w in "${WHEELS[@]}"; do
  read -r req file sum <<<"$w"
  echo "libtorch: downloading $req (once; cached in $CACHE_ROOT)" >&2
  if ! "$PY" -m pip download --quiet --no-deps --only-binary=:all: \
      --platform manylinux1_x86_64 --python-version 3.11 --implementation cp --abi cp311 \
      -d "$WORK/wheels" "$req" >"$WORK/pip.log" 2>&1; then
    tail -n 5 "$WORK/pip.log" >&2
    die "pip download $req failed (network or package index unreachable?); or set LIBTORCH=/path/to/libtorch-2.1"
  fi
  [[ -f $WORK/wheels/$file ]] || die "pip download $req did not produce $file"
  got=$(sha256sum "$WORK/wheels/$file" | cut -d' ' -f1)
  [[ $got == "$sum" ]] || die "$file: sha256 $got, want $sum: checksum mismatch (corrupt download or a changed package)"
done

OUT=$WORK/libtorch
mkdir -p "$OUT/lib"
torch_whl=$WORK/wheels/$(cut -d' ' -f2 <<<"${WHEELS[0]}")
unzip -q "$torch_whl" 'torch/include/*' 'torch/lib/libtorch_cpu.so' 'torch/lib/libc10.so' \
  'torch/lib/libgomp-*.so.1' -d "$WORK/x"
mv "$WORK/x/torch/include" "$OUT/include"
mv "$WORK/x/torch/lib/"* "$OUT/lib/"
unzip -q -j "$WORK/wheels/$(cut -d' ' -f2 <<<"${WHEELS[1]}")" 'nvidia/cuda_runtime/lib/libcudart.so.12' -d "$OUT/lib"
unzip -q -j "$WORK/wheels/$(cut -d' ' -f2 <<<"${WHEELS[2]}")" 'nvidia/cuda_cupti/lib/libcupti.so.12' -d "$OUT/lib"

echo "$VERSION" >"$OUT/.complete"

rm -rf "$DEST"
mv "$OUT" "$DEST"
echo "libtorch: ready in $DEST" >&2
echo "$DEST"
