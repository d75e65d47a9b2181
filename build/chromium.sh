#!/usr/bin/env bash
# Print the path of a headless-capable Chromium for the audit/ browser tests on stdout
# (nothing else goes to stdout): MEMPO_CHROMIUM when set, else the first of chromium,
# chromium-browser and google-chrome on PATH, else, when running as root with apt-get,
# Debian's chromium installed once. Without one it prints nothing and says in one line on
# stderr why the browser tests will be skipped; it never fails.
set -uo pipefail

found() { command -v "$1" 2>/dev/null; }

if [[ -n ${MEMPO_CHROMIUM:-} ]]; then
  found "$MEMPO_CHROMIUM" || { echo "chromium: MEMPO_CHROMIUM=$MEMPO_CHROMIUM is not executable; the view/ browser tests will fail" >&2; echo "$MEMPO_CHROMIUM"; }
  exit 0
fi
for name in chromium chromium-browser google-chrome; do
  found $name && exit 0
done
if [[ $(id -u) != 0 ]] || ! command -v apt-get >/dev/null; then
  echo "chromium: none on PATH and no root apt-get to install it; the view/ browser tests will be skipped" >&2
  exit 0
fi
echo "chromium: installing Debian's chromium with apt-get (once, for the audit/ browser tests)" >&2
export DEBIAN_FRONTEND=noninteractive
install() { apt-get install -y -qq --no-install-recommends chromium >/dev/null 2>&1; }
# A fresh image has no package lists: fetch them once if the first try finds no package.
install || { apt-get update -qq >/dev/null 2>&1 && install; }
found chromium && exit 0
echo "chromium: apt-get install chromium failed; the view/ browser tests will be skipped" >&2
exit 0
