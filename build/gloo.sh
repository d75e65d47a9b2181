#!/usr/bin/env bash
# Print the directory of Gloo's C++ headers, fetched once into the cache, for
# train/collective: libtorch's c10d, the engine under torch.distributed, ships its Gloo
# process group compiled into libtorch_cpu.so (the torch wheels export
# c10d::ProcessGroupGloo and c10d::TCPStore) and its headers, but not the headers of Gloo
# itself that ProcessGroupGloo.hpp includes. Debian packages them (libgloo-dev, bookworm):
# 49 KB, pinned by sha256, unpacked without root (dpkg-deb, or ar and tar).
#
# Only the headers come from the package; the code that runs is the libtorch's own Gloo.
# The few inline parts of the headers the wrapper reaches (a shared_ptr to a transport
# device, an error's message) have kept their layout across Gloo's revisions; the
# collective tests check the result on every libtorch go.sh builds against.
#
# Without network or without the tools it prints nothing, says why on stderr and exits 0:
# train/collective then builds without a backend and says so when asked for one.
# GLOO_INCLUDE=DIR names headers already on the machine (a directory holding gloo/).
set -euo pipefail

warn() { echo "gloo: $*; train/collective builds without its Gloo backend" >&2; exit 0; }

if [[ -n ${GLOO_INCLUDE:-} ]]; then
  [[ -f $GLOO_INCLUDE/gloo/context.h ]] || warn "GLOO_INCLUDE=$GLOO_INCLUDE has no gloo/context.h"
  echo "$GLOO_INCLUDE"
  exit 0
fi

DEB=libgloo-dev_0.0~git20220518.5b14351-3_amd64.deb
SHA256=80529c9fd8af452faf489e686b94bf87075965c40673803810c4f41634b1e299
URLS=(
  "https://deb.debian.org/debian/pool/main/g/gloo/$DEB"
  "https://snapshot.debian.org/archive/debian/20250520T000000Z/pool/main/g/gloo/$DEB"
)
cache=${MEMPO_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mempo}/gloo-0.0-git20220518
if [[ -f $cache/.complete ]]; then
  echo "$cache/include"
  exit 0
fi

command -v curl >/dev/null || warn "curl not found"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
got=
for url in "${URLS[@]}"; do
  if curl -sSfL --retry 2 --connect-timeout 15 -o "$tmp/$DEB" "$url" 2>"$tmp/curl.err"; then
    got=$url
    break
  fi
done
[[ -n $got ]] || warn "could not download $DEB ($(tail -n 1 "$tmp/curl.err"))"
echo "$SHA256  $tmp/$DEB" | sha256sum -c --quiet - >/dev/null 2>&1 ||
  warn "$got does not match its pinned sha256 $SHA256"

mkdir -p "$tmp/x"
if command -v dpkg-deb >/dev/null; then
  dpkg-deb -x "$tmp/$DEB" "$tmp/x"
elif command -v ar >/dev/null; then
  (cd "$tmp" && ar x "$DEB" && tar -xf data.tar.* -C x)
else
  warn "neither dpkg-deb nor ar found to unpack $DEB"
fi
[[ -f $tmp/x/usr/include/gloo/context.h ]] || warn "$DEB holds no usr/include/gloo/context.h"

mkdir -p "$(dirname "$cache")"
# A directory beside the cache's place renamed onto it: a concurrent fetch that lost the
# race finds the winner's complete one.
stage=$(mktemp -d "$cache.tmp.XXXXXX")
mv "$tmp/x/usr/include" "$stage/include"
touch "$stage/.complete"
if ! mv -T "$stage" "$cache" 2>/dev/null; then
  rm -rf "$stage"
  [[ -f $cache/.complete ]] || warn "could not put the headers in $cache"
fi
echo "gloo: Gloo's headers ($DEB) in $cache/include" >&2
echo "$cache/include"
