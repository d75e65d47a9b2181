#!/usr/bin/env bash
# Fetch the pinned libtorch 2.1.2 that gotch v0.9.1 is generated against, once, into a
# cache directory shared by every clone; print that directory on stdout.
#
# PyPI's torch wheels carry a complete libtorch (the Linux one is the CUDA 12.1 build).
#
# Default, CPU: we take the CPU parts (libtorch_cpu, libc10, their bundled libgomp and the
# headers) into libtorch-2.1.2/. libtorch_cpu.so of the CUDA wheel also NEEDs
# libcudart.so.12 and libcupti.so.12, which load fine on machines without a GPU, so they
# come from NVIDIA's own pinned wheels. go.sh adds the link-time stand-ins for the CUDA
# libraries gotch's cgo directives name.
#
# LIBTORCH_CUDA=1: the same torch wheel's CUDA libraries as well (libtorch_cuda and what
# it loads), with every NVIDIA runtime wheel torch 2.1.2 pins in its METADATA
# (Requires-Dist), into libtorch-2.1.2-cu121/. About 2.6 GB to download, 4.3 GB installed.
set -euo pipefail

VERSION=2.1.2
CACHE_ROOT=${MEMPO_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mempo}

die() { echo "libtorch: $*" >&2; exit 1; }

case ${LIBTORCH_CUDA:-0} in
  0) CUDA=0 DEST=$CACHE_ROOT/libtorch-$VERSION ;;
  1) CUDA=1 DEST=$CACHE_ROOT/libtorch-$VERSION-cu121 ;;
  *) die "LIBTORCH_CUDA=$LIBTORCH_CUDA: want 0 (CPU build) or 1 (CUDA build)" ;;
esac

# name==version  wheel file  sha256 (PyPI's published digests)
TORCH="torch==2.1.2 torch-2.1.2-cp311-cp311-manylinux1_x86_64.whl a6ebbe517097ef289cc7952783588c72de071d4b15ce0f8b285093f0916b1162"
CPU_WHEELS=(
  "nvidia-cuda-runtime-cu12==12.1.105 nvidia_cuda_runtime_cu12-12.1.105-py3-none-manylinux1_x86_64.whl 6e258468ddf5796e25f1dc591a31029fa317d97a0a94ed93468fc86301d61e40"
  "nvidia-cuda-cupti-cu12==12.1.105 nvidia_cuda_cupti_cu12-12.1.105-py3-none-manylinux1_x86_64.whl e54fde3983165c624cb79254ae9818a456eb6e87a7fd4d56a2352c24ee542d7e"
)
# torch 2.1.2's Requires-Dist pins all but nvjitlink, which cusparse and cusolver NEED
# (libnvJitLink.so.12) and which nvidia-cusparse-cu12 leaves unpinned: 12.1.105 is the
# release of the same CUDA 12.1 toolkit.
CUDA_WHEELS=(
  "${CPU_WHEELS[@]}"
  "nvidia-cuda-nvrtc-cu12==12.1.105 nvidia_cuda_nvrtc_cu12-12.1.105-py3-none-manylinux1_x86_64.whl 339b385f50c309763ca65456ec75e17bbefcbbf2893f462cb8b90584cd27a1c2"
  "nvidia-cudnn-cu12==8.9.2.26 nvidia_cudnn_cu12-8.9.2.26-py3-none-manylinux1_x86_64.whl 5ccb288774fdfb07a7e7025ffec286971c06d8d7b4fb162525334616d7629ff9"
  "nvidia-cublas-cu12==12.1.3.1 nvidia_cublas_cu12-12.1.3.1-py3-none-manylinux1_x86_64.whl ee53ccca76a6fc08fb9701aa95b6ceb242cdaab118c3bb152af4e579af792728"
  "nvidia-cufft-cu12==11.0.2.54 nvidia_cufft_cu12-11.0.2.54-py3-none-manylinux1_x86_64.whl 794e3948a1aa71fd817c3775866943936774d1c14e7628c74f6f7417224cdf56"
  "nvidia-curand-cu12==10.3.2.106 nvidia_curand_cu12-10.3.2.106-py3-none-manylinux1_x86_64.whl 9d264c5036dde4e64f1de8c50ae753237c12e0b1348738169cd0f8a536c0e1e0"
  "nvidia-cusolver-cu12==11.4.5.107 nvidia_cusolver_cu12-11.4.5.107-py3-none-manylinux1_x86_64.whl 8a7ec542f0412294b15072fa7dab71d31334014a69f953004ea7a118206fe0dd"
  "nvidia-cusparse-cu12==12.1.0.106 nvidia_cusparse_cu12-12.1.0.106-py3-none-manylinux1_x86_64.whl f3b50f42cf363f86ab21f720998517a659a48131e8d538dc02f8768237bd884c"
  "nvidia-nccl-cu12==2.18.1 nvidia_nccl_cu12-2.18.1-py3-none-manylinux1_x86_64.whl 1a6c4acefcbebfa6de320f412bf7866de856e786e0462326ba1bac40de0b5e71"
  "nvidia-nvtx-cu12==12.1.105 nvidia_nvtx_cu12-12.1.105-py3-none-manylinux1_x86_64.whl dc21cf308ca5691e7c04d962e213f8a4aa9bbfa23d95412f452254c2caeb09e5"
  "nvidia-nvjitlink-cu12==12.1.105 nvidia_nvjitlink_cu12-12.1.105-py3-none-manylinux1_x86_64.whl 015fed699b390ce3b8a8578d822d501a4194d0a341d3859554067c1ab291cb85"
)
# The torch wheel's libraries each build keeps. libtorch_cuda_linalg (cuSOLVER/MAGMA
# linear algebra) and libcaffe2_nvrtc (runtime-compiled kernels) are dlopened by
# libtorch_cuda on first use, so no linker would notice them missing.
CPU_LIBS=(libtorch_cpu.so libc10.so 'libgomp-*.so.1')
CUDA_LIBS=("${CPU_LIBS[@]}" libtorch.so libtorch_cuda.so libc10_cuda.so libtorch_cuda_linalg.so libcaffe2_nvrtc.so)

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

if ((CUDA)); then
  wheels=("$TORCH" "${CUDA_WHEELS[@]}") libs=("${CUDA_LIBS[@]}")
else
  wheels=("$TORCH" "${CPU_WHEELS[@]}") libs=("${CPU_LIBS[@]}")
fi

mkdir -p "$CACHE_ROOT"
WORK=$(mktemp -d "$CACHE_ROOT/.fetch-XXXXXX")
trap 'rm -rf "$WORK"' EXIT

# Verified wheels stay in $DL until the install is complete, so a fetch interrupted
# after some of the CUDA build's 2.6 GB does not download those again.
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
      --platform manylinux1_x86_64 --python-version 3.11 --implementation cp --abi cp311 \
      -d "$WORK/wheels" "$req" >"$WORK/pip.log" 2>&1; then
    tail -n 5 "$WORK/pip.log" >&2
    die "pip download $req failed (network or package index unreachable?); or set LIBTORCH=/path/to/libtorch-2.1"
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
for w in "${wheels[@]:1}"; do
  read -r _ file _ <<<"$w"
  if ((CUDA)); then
    # Every library of the wheel: cuDNN and cuBLAS dlopen their siblings (cudnn_*_infer,
    # cublasLt), NVRTC its builtins.
    unzip -q -j "$DL/$file" 'nvidia/*/lib/*.so*' -d "$OUT/lib"
  else
    case $file in
      nvidia_cuda_runtime_*) unzip -q -j "$DL/$file" 'nvidia/cuda_runtime/lib/libcudart.so.12' -d "$OUT/lib" ;;
      nvidia_cuda_cupti_*) unzip -q -j "$DL/$file" 'nvidia/cuda_cupti/lib/libcupti.so.12' -d "$OUT/lib" ;;
    esac
  fi
done

if ((CUDA)) && command -v ldd >/dev/null; then
  # The wheels' libraries find each other through their RPATH $ORIGIN, all in one
  # directory. libcaffe2_nvrtc also NEEDs libcuda.so.1, which only the NVIDIA driver
  # provides; libtorch_cuda loads it when a GPU runs a runtime-compiled kernel.
  for so in "$OUT"/lib/*.so*; do
    missing=$(ldd "$so" | grep 'not found' | grep -v 'libcuda\.so\.1' || true)
    [[ -z $missing ]] || die "$(basename "$so") needs libraries no wheel provided: $(tr -s ' \t\n' ' ' <<<"$missing")"
  done
fi

if ((CUDA)); then echo "$VERSION cu121" >"$OUT/.complete"; else echo "$VERSION" >"$OUT/.complete"; fi

rm -rf "$DEST"
mv "$OUT" "$DEST"
for w in "${wheels[@]}"; do
  read -r _ file _ <<<"$w"
  rm -f "$DL/$file"
done
rmdir "$DL" 2>/dev/null || true
echo "libtorch: ready in $DEST" >&2
echo "$DEST"
