# The Python environment build/ecosystem/check.sh opens a run with, sourced by it (and by
# venv_test.sh). eco_python prints the interpreter to use:
#
#   - the bench environment of build/bench_compare/venv.sh, ~/.cache/mempo/bench-venv,
#     when it already imports every module check.py uses;
#   - else ~/.cache/mempo/ecosystem-venv (MEMPO_CACHE moves it; ECOSYSTEM_VENV=DIR names
#     another and turns the bench environment's reuse off), made once from requirements.txt
#     with a CPython 3.10-3.14 (PYTHON picks one) and pip: about 120 MB of wheels from
#     PyPI, 540 MB installed.
#
# The environment is built in a temp directory beside its place and renamed into it only
# once every module imports, so a killed install never leaves one that counts as ready.
# It is ready once .complete equals requirements.txt and the modules import.
#
# eco_python returns 0 with the interpreter's path on stdout; 2 when there is no Python
# that can make a virtual environment or the package index is unreachable (the reason on
# stderr: check.sh then skips); 1 when pip or the imports failed (the log's path on stderr).

eco_here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../bench_compare/venv.sh
. "$eco_here/../bench_compare/venv.sh"
eco_venv=${ECOSYSTEM_VENV:-$venv_cache/ecosystem-venv}
# What check.py and serve_check.py import; jinja2 renders the chat templates.
eco_modules='pyarrow.dataset, pandas, duckdb, transformers, jinja2, openai'
# pip's messages when it could not reach the index at all (DNS, refused, no route,
# timeouts, a proxy that does not answer), as opposed to an index that answered "no".
eco_offline='NewConnectionError|ConnectTimeoutError|ProxyError|Read timed out|Network is unreachable|Temporary failure in name resolution|Name or service not known'

# eco_ready PYTHON: PYTHON imports every module check.py uses.
eco_ready() {
  [[ -x $1 ]] && "$1" -c "import $eco_modules" >/dev/null 2>&1
}

eco_python() {
  if [[ -z ${ECOSYSTEM_VENV:-} ]] && eco_ready "$venv/bin/python"; then
    echo "$venv/bin/python"
    return 0
  fi
  if ! cmp -s "$eco_venv/.complete" "$eco_here/requirements.txt" || ! eco_ready "$eco_venv/bin/python"; then
    eco_install || return
  fi
  echo "$eco_venv/bin/python"
}

# eco_install makes $eco_venv from requirements.txt, in a temp directory renamed into place.
eco_install() {
  local py log=$eco_venv.log tmp rc=0
  py=$(venv_python) || {
    echo "ecosystem: skipped: no CPython 3.10-3.14 found to make $eco_venv with (PYTHON=/path/to/python3 names one)" >&2
    return 2
  }
  "$py" -c 'import venv, ensurepip' 2>/dev/null || {
    echo "ecosystem: skipped: $py cannot make a virtual environment with pip (install python3-venv)" >&2
    return 2
  }
  # It replaces what is at $eco_venv: refuse when that is anything but an environment.
  if [[ -e $eco_venv && ! -f $eco_venv/pyvenv.cfg && -n $(ls -A "$eco_venv" 2>/dev/null) ]]; then
    echo "ecosystem: $eco_venv is not a virtual environment; move it away or set ECOSYSTEM_VENV to another directory" >&2
    return 1
  fi
  mkdir -p "$(dirname "$eco_venv")" || return 1
  # Temp directories an install killed an hour or more ago left behind.
  find "$(dirname "$eco_venv")" -maxdepth 1 -name "$(basename "$eco_venv").tmp.*" -mmin +60 -exec rm -rf {} + 2>/dev/null || true
  tmp=$(mktemp -d "$eco_venv.tmp.XXXXXX") && chmod 755 "$tmp" || return 1
  echo "ecosystem: installing pyarrow, pandas, duckdb, transformers and openai ($eco_here/requirements.txt) into $eco_venv with $("$py" -V 2>&1) (once; about 120 MB from PyPI, 540 MB installed)" >&2
  # A subshell, so that its traps remove the temp directory on an interrupt without
  # touching the caller's.
  (
    trap 'rm -rf "$tmp"' EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    if ! "$py" -m venv "$tmp" >"$log" 2>&1; then
      echo "ecosystem: skipped: $py cannot make a virtual environment; log in $log" >&2
      exit 2
    fi
    if ! "$tmp/bin/python" -m pip install --no-cache-dir --progress-bar off --only-binary :all: \
      -r "$eco_here/requirements.txt" >>"$log" 2>&1; then
      if grep -qE "$eco_offline" "$log"; then
        echo "ecosystem: skipped: the package index is unreachable (pip could not connect); log in $log" >&2
        exit 2
      fi
      tail -n 5 "$log" >&2
      echo "ecosystem: pip could not install $eco_here/requirements.txt into $eco_venv; log in $log" >&2
      exit 1
    fi
    if ! "$tmp/bin/python" -c "import $eco_modules" >>"$log" 2>&1; then
      tail -n 5 "$log" >&2
      echo "ecosystem: $eco_modules do not all import after pip installed them; log in $log" >&2
      exit 1
    fi
    cp "$eco_here/requirements.txt" "$tmp/.complete" || exit 1
    rm -rf "$eco_venv"
    # -T: rename onto the name, never into a directory another install just put there.
    # A venv's python runs from anywhere; only the scripts in bin/ name the temp path.
    if ! mv -T "$tmp" "$eco_venv" 2>>"$log"; then
      cmp -s "$eco_venv/.complete" "$eco_here/requirements.txt" && exit 0 # a concurrent install won
      echo "ecosystem: could not rename $tmp to $eco_venv; log in $log" >&2
      exit 1
    fi
    "$eco_venv/bin/python" -c 'import sys; from importlib.metadata import version as v
print(f"ecosystem: {sys.prefix} ready:", ", ".join(f"{m} {v(m)}" for m in ("pyarrow", "pandas", "duckdb", "transformers", "openai")))' >&2 || true
  ) || rc=$?
  return $rc
}
