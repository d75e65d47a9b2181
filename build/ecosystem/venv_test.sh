#!/usr/bin/env bash
# Checks venv.sh's decisions with a stand-in python (its venv and pip act as FAKE says)
# and a PATH without any real Python; touches no network and nothing outside a temp dir:
# it skips (exit 2, one line) without a Python, without venv/ensurepip, or when pip cannot
# reach the index; fails (exit 1, naming the log) when pip fails otherwise; a killed
# install leaves nothing that counts as ready; a finished one is renamed into place, is
# reused, and is rebuilt when requirements.txt changes; the bench environment is reused
# when it has every module; a directory that is not an environment is never removed.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
ok() { echo "ok   $*"; }
bad() {
  echo "FAIL $*"
  fail=1
}

# Only the tools venv.sh and the stand-in use, so that no real python3 is found.
mkdir -p "$tmp/tools"
for t in bash env dirname basename cmp mkdir mktemp chmod find ls cp rm mv grep tail cat touch kill; do
  ln -s "$(command -v "$t")" "$tmp/tools/$t"
done

# The stand-in: a CPython 3.11 whose venv copies itself and whose pip does what FAKE says
# (ok, offline, broken, die: killed mid-install, novenv, noensurepip). A copy "imports"
# every module once its pip ran ok, which leaves the file installed beside its bin/.
cat >"$tmp/fakepy" <<'SH'
#!/usr/bin/env bash
root=$(cd "$(dirname "$0")/.." && pwd)
case "$1 $2" in
"-V "*) echo "Python 3.11.0" ;;
"-c import venv, ensurepip") [[ $FAKE != noensurepip ]] ;;
"-c import sys; sys.exit"*) exit 0 ;;
"-c import sys; from importlib"*) echo "ecosystem: $root ready: (stand-in)" ;;
"-c import "*) [[ -f $root/installed ]] ;;
"-m venv")
  [[ $FAKE == novenv ]] && { echo "Error: ensurepip failed" >&2; exit 1; }
  mkdir -p "$3/bin" && cp "$0" "$3/bin/python" && touch "$3/pyvenv.cfg" ;;
"-m pip")
  touch "$root/partial"
  case $FAKE in
  ok) touch "$root/installed" ;;
  offline)
    echo "WARNING: Retrying (Retry(total=4)) after connection broken by 'NewConnectionError(': Failed to establish a new connection: [Errno -3] Temporary failure in name resolution')'" >&2
    echo "ERROR: Could not find a version that satisfies the requirement pyarrow==22.0.0" >&2
    exit 1 ;;
  broken) echo "ERROR: No matching distribution found for pyarrow==22.0.0" >&2; exit 1 ;;
  die) kill -KILL $PPID; exit 1 ;;
  esac ;;
*) echo "fakepy: unexpected $*" >&2; exit 3 ;;
esac
SH
chmod +x "$tmp/fakepy"

# eco VENV FAKE [VAR=VALUE...]: runs eco_python; sets rc, out and err.
eco() {
  local v=$1 mode=$2
  shift 2
  out=$(env -i HOME="$tmp" PATH="$tmp/tools" MEMPO_CACHE="$tmp/cache" PYTHON="$tmp/fakepy" ECOSYSTEM_VENV="$v" FAKE="$mode" "$@" \
    bash -c '. "$1/venv.sh" && eco_python' - "$here" 2>"$tmp/err")
  rc=$?
  err=$(cat "$tmp/err")
}

# expect NAME RC MESSAGE: the last eco exited RC with MESSAGE on stderr.
expect() {
  if [[ $rc == "$2" ]] && grep -qF -- "$3" <<<"$err"; then ok "$1"; else bad "$1: exit $rc, stderr: $err; want exit $2 and: $3"; fi
}

# ready VENV: VENV was renamed into place complete, with no temp directory left beside it.
ready() {
  cmp -s "$1/.complete" "$here/requirements.txt" && [[ -f $1/installed ]] &&
    [[ -z $(find "$(dirname "$1")" -maxdepth 1 -name "$(basename "$1").tmp.*") ]]
}

eco "$tmp/v1" ok PYTHON="$tmp/none"
expect "no Python: skipped" 2 "ecosystem: skipped: no CPython 3.10-3.14 found"
eco "$tmp/v2" noensurepip
expect "no venv or ensurepip: skipped" 2 "cannot make a virtual environment with pip (install python3-venv)"
eco "$tmp/v3" novenv
expect "venv fails: skipped" 2 "cannot make a virtual environment; log in $tmp/v3.log"
eco "$tmp/v4" offline
expect "index unreachable: skipped" 2 "skipped: the package index is unreachable"
eco "$tmp/v5" broken
expect "pip fails: a failure naming the log" 1 "pip could not install $here/requirements.txt into $tmp/v5; log in $tmp/v5.log"
for v in v2 v3 v4 v5; do
  [[ -e $tmp/$v ]] && bad "a failed install left $tmp/$v"
  [[ -n $(find "$tmp" -maxdepth 1 -name "$v.tmp.*") ]] && bad "a failed install left $tmp/$v.tmp.*"
done

eco "$tmp/v6" die
killed=$(find "$tmp" -maxdepth 1 -name 'v6.tmp.*')
if [[ $rc != 0 && ! -e $tmp/v6 && -f $killed/partial ]]; then
  ok "killed install: its half stays in a temp directory, nothing at $tmp/v6"
else
  bad "killed install: exit $rc, temp $killed, $tmp/v6: $(ls -A "$tmp/v6" 2>&1)"
fi
eco "$tmp/v6" ok
if [[ $rc == 0 && $out == "$tmp/v6/bin/python" ]] && cmp -s "$tmp/v6/.complete" "$here/requirements.txt"; then
  ok "after a killed install: a fresh one, ready"
else
  bad "after a killed install: exit $rc, python $out, stderr: $err"
fi

eco "$tmp/v7" ok
if [[ $rc == 0 && $out == "$tmp/v7/bin/python" ]] && ready "$tmp/v7" && grep -qF "ecosystem: installing" <<<"$err"; then
  ok "fresh install: renamed into place complete, progress printed"
else
  bad "fresh install: exit $rc, python $out, stderr: $err"
fi
eco "$tmp/v7" broken
if [[ $rc == 0 && $out == "$tmp/v7/bin/python" && -z $err ]]; then ok "a ready environment is reused"; else bad "reuse: exit $rc, python $out, stderr: $err"; fi
echo "older requirements" >"$tmp/v7/.complete"
eco "$tmp/v7" ok
if [[ $rc == 0 ]] && ready "$tmp/v7" && grep -qF "ecosystem: installing" <<<"$err"; then ok "changed requirements: rebuilt"; else bad "changed requirements: exit $rc, stderr: $err"; fi

mkdir -p "$tmp/cache/bench-venv/bin"
cp "$tmp/fakepy" "$tmp/cache/bench-venv/bin/python"
touch "$tmp/cache/bench-venv/installed"
eco "" broken
if [[ $rc == 0 && $out == "$tmp/cache/bench-venv/bin/python" ]]; then ok "the bench environment is reused"; else bad "bench reuse: exit $rc, python $out, stderr: $err"; fi
eco "$tmp/v8" ok
[[ $out == "$tmp/v8/bin/python" ]] && ok "ECOSYSTEM_VENV wins over the bench environment" || bad "ECOSYSTEM_VENV: python $out"

mkdir -p "$tmp/keep" && echo data >"$tmp/keep/file"
eco "$tmp/keep" ok
expect "a directory that is not an environment: refused" 1 "$tmp/keep is not a virtual environment"
[[ -f $tmp/keep/file ]] || bad "$tmp/keep/file was removed"

# check.sh itself: one line and exit 0 when it skips, before building anything.
got=$(env -i HOME="$tmp" PATH="$tmp/tools" MEMPO_CACHE="$tmp/cache2" PYTHON="$tmp/none" "$here/check.sh" 2>&1)
rc=$?
if [[ $rc == 0 && $(wc -l <<<"$got") == 1 && $got == "ecosystem: skipped: "* ]]; then ok "check.sh skips with one line"; else bad "check.sh skip: exit $rc, output: $got"; fi
exit $fail
