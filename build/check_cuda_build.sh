#!/usr/bin/env bash
# Checks a CUDA build (make build CUDA=1, or a bundle's bin/) on any machine, GPU or
# not: the binaries resolve libtorch_cuda and everything it needs, and a real stage run
# with --device cuda and every GPU hidden stops at flag time with the no-device error,
# exit 1, having created nothing.
#
# make build CUDA=1 links against the link kit (build/libtorch.sh LIBTORCH_CUDA=1), which
# has libtorch_cuda but not the NVIDIA libraries it needs (cuDNN, cuBLAS, NCCL...): those
# come at run time from an installed CUDA torch 2.11, whose lib/ goes on LD_LIBRARY_PATH
# ahead of the binaries' RUNPATH. When they do not resolve as things stand, the check
# takes that torch from CHECK_PYTHON (default: the bench venv's python, else python3).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=$(cd "${1:?usage: check_cuda_build.sh BIN_DIR}" && pwd) || exit 1
exe=$bin/mempo-rollout
fail=0
[[ -x $exe ]] || { echo "FAIL $exe is missing; run make build CUDA=1"; exit 1; }

if ldd "$exe" | grep -q 'not found'; then
  venv=${MEMPO_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mempo}/bench-venv/bin/python
  py=${CHECK_PYTHON:-$([[ -x $venv ]] && echo "$venv" || echo python3)}
  if lt=$(LIBTORCH=python PYTHON=$py "$here/libtorch.sh") && [[ -f $lt/lib/libtorch_cuda.so ]]; then
    export LD_LIBRARY_PATH=$lt/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    echo "     the NVIDIA libraries come from the CUDA torch of $py: LD_LIBRARY_PATH=$lt/lib"
  else
    echo "     no CUDA torch in $py to take the NVIDIA libraries from (set CHECK_PYTHON)"
  fi
fi
deps=$(ldd "$exe")
cuda=$(grep 'libtorch_cuda\.so' <<<"$deps")
if [[ $cuda == *"=> /"* ]]; then echo "ok   ldd: ${cuda#"${cuda%%[! $'\t']*}"}"; else echo "FAIL ldd $exe: libtorch_cuda.so not linked or not resolved: ${cuda:-absent}"; fail=1; fi
missing=$(grep 'not found' <<<"$deps")
if [[ -z $missing ]]; then echo "ok   ldd: $(wc -l <<<"$deps") libraries, none missing"; else echo "FAIL ldd $exe: $missing"; fail=1; fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/run"
want="no CUDA device is visible (CUDA build linked, device count 0; check CUDA_VISIBLE_DEVICES and the driver)"
# An empty CUDA_VISIBLE_DEVICES hides every GPU, so the check means the same on a GPU machine.
err=$(cd "$tmp/run" && CUDA_VISIBLE_DEVICES= "$exe" --prompts p --policy c --out out --device cuda 2>&1 >/dev/null)
code=$?
echo "     $exe --device cuda (exit $code): $err"
if [[ $code == 1 && $err == *"$want"* ]]; then echo "ok   --device cuda without a visible GPU fails at flag time"; else echo "FAIL want exit 1 and \"$want\""; fail=1; fi
if [[ -n $(ls -A "$tmp/run") ]]; then echo "FAIL the refused run created $(ls -A "$tmp/run")"; fail=1; fi
exit $fail
