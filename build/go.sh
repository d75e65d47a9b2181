#!/usr/bin/env bash
# Run the go command with cgo pointed at libtorch 2.1: the pinned cache from libtorch.sh,
# or $LIBTORCH when set (any libtorch 2.1 install, e.g. a CUDA build on a GPU machine).
# Nothing in the Go module cache is edited: every flag travels through CGO_* variables.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)

if [[ -z ${LIBTORCH:-} ]]; then
  LIBTORCH=$("$here/libtorch.sh")
fi
[[ -f $LIBTORCH/include/torch/csrc/api/include/torch/version.h ]] ||
  { echo "libtorch: $LIBTORCH has no include/torch/csrc/api/include/torch/version.h; LIBTORCH must point at a libtorch 2.1 install" >&2; exit 1; }
ver=$(sed -n 's/^#define TORCH_VERSION_MINOR \([0-9]*\)/\1/p;s/^#define TORCH_VERSION_MAJOR \([0-9]*\)/\1./p' \
  "$LIBTORCH/include/torch/csrc/api/include/torch/version.h" | tr -d '\n')
[[ $ver == 2.1 ]] || { echo "libtorch: $LIBTORCH is version $ver; gotch v0.9.1 needs 2.1" >&2; exit 1; }

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

# PyPI wheels use the pre-C++11 ABI; official cxx11-abi libtorch zips do not. Only c10's
# own symbols tell: the wheel's libc10 also exports libstdc++ clones naming __cxx11.
# (grep -q here used to race: nm killed by SIGPIPE failed the pipeline, unless nm had
# already written everything, as it sometimes does on a busy machine.)
abi=0
if [[ $(nm -D --defined-only "$LIBTORCH/lib/libc10.so" 2>/dev/null | grep -c ' _ZN3c10.*__cxx11') != 0 ]]; then abi=1; fi

lib=$LIBTORCH/lib
ldflags="-L$lib -Wl,-rpath,$lib -Wl,--as-needed"
if [[ -f $lib/libtorch_cuda.so ]]; then
  # Nothing references libtorch_cuda directly; force it in so CUDA kernels register.
  ldflags+=" -Wl,--no-as-needed -ltorch_cuda -ltorch -Wl,--as-needed"
fi
ldflags+=" -L$stub"

export CGO_ENABLED=1
export CGO_CFLAGS="-I$LIBTORCH/include -D_GLIBCXX_USE_CXX11_ABI=$abi"
export CGO_CXXFLAGS="-I$LIBTORCH/include -I$LIBTORCH/include/torch/csrc/api/include -D_GLIBCXX_USE_CXX11_ABI=$abi -Wno-deprecated-declarations"
export CGO_LDFLAGS="$ldflags"
exec go "$@"
