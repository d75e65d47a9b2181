#!/usr/bin/env bash
# Run the go command with cgo pointed at a libtorch 2.x: the one build/libtorch.sh names
# (the pinned 2.11.0 by default; LIBTORCH=python for the user's own PyTorch, or a path).
# Nothing in the Go module cache is edited: every flag travels through CGO_* variables and
# CXX. gotch v0.9.1's C++ layer was generated against libtorch 2.1; what a newer one needs
# comes from build/torch_compat.h (force-included) and, where the headers ask for C++20
# while gotch's cgo directive says -std=c++17, from the compiler wrapper build/cxx.sh.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)

LIBTORCH=$("$here/libtorch.sh")
export LIBTORCH

ver=$("$here/libtorch_version.sh" "$LIBTORCH")
[[ $ver == 2.* ]] || { echo "libtorch: $LIBTORCH is version '${ver:-unknown}'; mempo builds against libtorch 2.x" >&2; exit 1; }
# The torch package's TestVersion checks that the binary runs on the libtorch it was built for.
export LIBTORCH_BUILD_VERSION=$ver

# gotch's libtch/lib.go names CUDA libraries unconditionally; on machines without them,
# empty stand-ins satisfy the linker and --as-needed keeps them out of the binary.
stub=${MEMPO_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mempo}/stub
if [[ ! -f $stub/.complete ]]; then
  mkdir -p "$stub"
  echo 'void mempo_libtorch_stub(void) {}' >"$stub/stub.c"
  for s in torch torch_cuda c10_cuda cuda cudart cublas cudnn caffe2_nvrtc nvrtc-builtins nvrtc nvToolsExt; do
    cc -shared -fPIC -o "$stub/lib$s.so" "$stub/stub.c"
  done
  touch "$stub/.complete"
fi

# Official cxx11-abi libtorch zips and the wheels from 2.7 on use the C++11 ABI; older
# wheels do not. Only c10's own symbols tell: a pre-C++11-ABI libc10 also exports
# libstdc++ clones naming __cxx11. (grep -q here used to race: nm killed by SIGPIPE failed
# the pipeline, unless nm had already written everything.)
abi=0
if [[ $(nm -D --defined-only "$LIBTORCH/lib/libc10.so" 2>/dev/null | grep -c ' _ZN3c10.*__cxx11') != 0 ]]; then abi=1; fi

# The C++ standard the headers require: torch/all.h refuses anything below C++20 from 2.13.
std=c++17
if grep -q '__cplusplus < 202002L' "$LIBTORCH/include/torch/csrc/api/include/torch/all.h" 2>/dev/null; then
  std=c++20
  export LIBTORCH_CXX_STD=$std
  [[ ${CXX:-} == "$here/cxx.sh" ]] || export LIBTORCH_CXX=${CXX:-g++} # not itself, when nested
  export CXX=$here/cxx.sh
fi

lib=$LIBTORCH/lib
ldflags="-L$lib -Wl,-rpath,$lib -Wl,--as-needed"
if [[ -f $lib/libtorch_cuda.so ]]; then
  # Nothing references libtorch_cuda directly; force it in so CUDA kernels register. Its
  # own NVIDIA libraries (cuDNN, cuBLAS, NCCL...) are found at run time through its RPATH
  # (a Python torch) or LD_LIBRARY_PATH, and may be absent when linking (a CUDA=1 build).
  ldflags+=" -Wl,--no-as-needed -ltorch_cuda -ltorch -Wl,--as-needed -Wl,--allow-shlib-undefined"
fi
ldflags+=" -L$stub"

# The Go build cache keys cgo packages by their flags, not by headers outside the package:
# the defines below key it by the libtorch version, the standard and our two files' content.
compat=$(cat "$here/torch_compat.h" "$here/cxx.sh" | sha256sum | cut -c1-12)
export CGO_ENABLED=1
export CGO_CFLAGS="-I$LIBTORCH/include"
export CGO_CXXFLAGS="-I$LIBTORCH/include -I$LIBTORCH/include/torch/csrc/api/include -D_GLIBCXX_USE_CXX11_ABI=$abi -DMEMPO_TORCH_VERSION=$ver -DMEMPO_CXX_STD=$std -DMEMPO_COMPAT=$compat -include $here/torch_compat.h -Wno-deprecated-declarations"
# Gloo's headers for train/collective's c10d process group (build/gloo.sh); without them
# it builds without a backend.
if gloo=$("$here/gloo.sh") && [[ -n $gloo ]]; then
  CGO_CXXFLAGS+=" -isystem $gloo -DMEMPO_GLOO=1"
fi
export CGO_LDFLAGS="$ldflags"
exec go "$@"
