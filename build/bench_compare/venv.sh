# The project's cached Python environment, sourced by the scripts that need one
# (build/bench_compare/run.sh, build/ecosystem/check.sh): torch 2.11.0, transformers
# 4.44.2 and the Arrow readers of requirements.txt, in ~/.cache/mempo/bench-venv
# (MEMPO_CACHE moves it), made by venv_install with a CPython 3.10–3.14 (PYTHON picks
# one). A venv is complete once .complete equals requirements.txt.

venv_here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
venv_cache=${MEMPO_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mempo}
venv=$venv_cache/bench-venv

# venv_python prints the first interpreter torch 2.11.0 has wheels for (CPython 3.10–3.14).
venv_python() {
  local p
  for p in ${PYTHON:-} python3.12 python3.11 python3.13 python3.10 python3.14 python3; do
    if command -v "$p" >/dev/null 2>&1 &&
      "$p" -c 'import sys; sys.exit(not (3, 10) <= sys.version_info[:2] <= (3, 14))' 2>/dev/null; then
      command -v "$p"
      return
    fi
  done
  return 1
}

# venv_install makes $venv complete, once. A venv made from an older requirements.txt
# gets only what it lacks; a new one is built beside it and renamed into place. It
# prints why and returns 1 when it cannot.
venv_install() {
  local py log=$venv_cache/bench-venv.log
  cmp -s "$venv/.complete" "$venv_here/requirements.txt" 2>/dev/null && return 0
  mkdir -p "$venv_cache"
  if [[ -x $venv/bin/python ]]; then
    echo "installing what $venv_here/requirements.txt adds into $venv" >&2
    if "$venv/bin/python" -m pip install --no-cache-dir --progress-bar off -r "$venv_here/requirements.txt" >"$log" 2>&1 &&
      "$venv/bin/python" -c 'import torch, transformers, pyarrow' >>"$log" 2>&1; then
      cp "$venv_here/requirements.txt" "$venv/.complete"
      return 0
    fi
    tail -n 5 "$log" >&2
    echo "pip could not complete $venv (package index unreachable?); log in $log" >&2
    return 1
  fi
  py=$(venv_python) || { echo "no CPython 3.10–3.14 found (torch 2.11.0 has wheels for no other); set PYTHON=/path/to/python3.12" >&2; return 1; }
  "$py" -c 'import venv, ensurepip' 2>/dev/null ||
    { echo "$py cannot make a virtual environment with pip (install python3-venv)" >&2; return 1; }
  echo "installing torch 2.11.0 and transformers 4.44.2 into $venv (once; about 3 GB from PyPI)" >&2
  rm -rf "$venv.tmp"
  if ! { "$py" -m venv "$venv.tmp" &&
    "$venv.tmp/bin/python" -m pip install --no-cache-dir --progress-bar off -r "$venv_here/requirements.txt"; } >"$log" 2>&1; then
    tail -n 5 "$log" >&2
    rm -rf "$venv.tmp"
    echo "pip could not install $venv_here/requirements.txt (package index unreachable?); log in $log" >&2
    return 1
  fi
  "$venv.tmp/bin/python" -c 'import torch, transformers, pyarrow' >>"$log" 2>&1 ||
    { tail -n 5 "$log" >&2; rm -rf "$venv.tmp"; echo "torch, transformers or pyarrow does not import; log in $log" >&2; return 1; }
  cp "$venv_here/requirements.txt" "$venv.tmp/.complete"
  rm -rf "$venv"
  mv "$venv.tmp" "$venv" # a venv's python runs from anywhere; only bin/ scripts name the path
}
