#!/usr/bin/env bash
# Checks that build/libtorch.sh fails with one clear line, not a compiler wall, when
# pip is missing, the download fails, a wheel's checksum differs, or LIBTORCH names no
# libtorch; and that LIBTORCH=python finds the torch/ of the given Python. Uses stand-in
# python executables and a throwaway cache; touches no network.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0

expect() { # name, wanted message fragment, command...
  local name=$1 want=$2; shift 2
  local out
  out=$("$@" 2>&1 >/dev/null) && { echo "FAIL $name: exit 0, want failure"; fail=1; return; }
  if grep -q -- "$want" <<<"$out"; then echo "ok   $name"; else echo "FAIL $name: got: $out; want: $want"; fail=1; fi
}

cat >"$tmp/nopip" <<'PY'
#!/usr/bin/env bash
exit 1
PY
cat >"$tmp/offline" <<'PY'
#!/usr/bin/env bash
[[ "$*" == *"--version"* ]] && { echo "pip 23"; exit 0; }
echo "ERROR: Could not find a version that satisfies the requirement" >&2; exit 1
PY
cat >"$tmp/tampered" <<'PY'
#!/usr/bin/env bash
[[ "$*" == *"--version"* ]] && { echo "pip 23"; exit 0; }
while [[ $# -gt 0 ]]; do case $1 in -d) dir=$2; shift 2;; *) req=$1; shift;; esac; done
mkdir -p "$dir"; echo junk >"$dir/torch-2.11.0-cp311-cp311-manylinux_2_28_x86_64.whl"
PY
chmod +x "$tmp"/nopip "$tmp"/offline "$tmp"/tampered

export MEMPO_CACHE=$tmp/cache
unset LIBTORCH LIBTORCH_VERSION LIBTORCH_CUDA
expect "python missing" "not found; install python3" env PYTHON=$tmp/none "$here/libtorch.sh"
expect "pip missing" "is not available; install pip" env PYTHON=$tmp/nopip "$here/libtorch.sh"
expect "network down" "pip download torch==2.11.0 failed" env PYTHON=$tmp/offline "$here/libtorch.sh"
expect "checksum differs" "checksum mismatch" env PYTHON=$tmp/tampered "$here/libtorch.sh"
expect "CUDA network down" "pip download torch==2.11.0 failed" env PYTHON=$tmp/offline LIBTORCH_CUDA=1 "$here/libtorch.sh"
expect "pinned 2.15.0 network down" "pip download torch==2.15.0 failed" env PYTHON=$tmp/offline LIBTORCH_VERSION=2.15.0 "$here/libtorch.sh"
expect "LIBTORCH_CUDA unknown" "want 0 (CPU build) or 1 (CUDA build)" env LIBTORCH_CUDA=yes "$here/libtorch.sh"
expect "version not pinned" "LIBTORCH_VERSION=2.9.9 is not pinned here" env LIBTORCH_VERSION=2.9.9 "$here/libtorch.sh"
expect "LIBTORCH not a libtorch" "has no include/torch or lib/libc10.so" env LIBTORCH=$tmp "$here/libtorch.sh"
expect "LIBTORCH=python, no python" "LIBTORCH=python: $tmp/none not found" env LIBTORCH=python PYTHON=$tmp/none "$here/libtorch.sh"
expect "LIBTORCH=python, no torch" "has no torch package" env LIBTORCH=python PYTHON=$tmp/nopip "$here/libtorch.sh"

# LIBTORCH=python: a Python whose torch package is a directory with include/torch and lib/.
mkdir -p "$tmp/site/torch/include/torch" "$tmp/site/torch/lib"
touch "$tmp/site/torch/__init__.py" "$tmp/site/torch/lib/libc10.so"
if command -v python3 >/dev/null; then
  got=$(LIBTORCH=python PYTHON=python3 PYTHONPATH=$tmp/site "$here/libtorch.sh" 2>&1)
  if [[ $got == "$tmp/site/torch" ]]; then echo "ok   LIBTORCH=python"; else echo "FAIL LIBTORCH=python: got $got, want $tmp/site/torch"; fail=1; fi
fi
for d in libtorch-2.11.0 libtorch-2.11.0-cu13 libtorch-2.15.0; do
  [[ -e $tmp/cache/$d ]] && { echo "FAIL a failed fetch left $tmp/cache/$d"; fail=1; }
done
exit $fail
