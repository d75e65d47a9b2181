#!/usr/bin/env bash
# Print the packages of this module that do not depend on gotch (cgo + libtorch).
# Arguments are package patterns that must be among them; naming one that imports
# gotch is an error, so the pure-Go rule of DESIGN.md §1 cannot silently erode.
set -euo pipefail
tensor=github.com/sugarme/gotch
all=$(go list -f '{{.ImportPath}}{{range .Deps}} {{.}}{{end}}' ./...)
pure=$(awk -v t="$tensor" '{ ok=1; for (i=2;i<=NF;i++) if (index($i, t)==1) ok=0; if (ok) print $1 }' <<<"$all")
for pattern in "$@"; do
  for pkg in $(go list "$pattern" 2>/dev/null); do
    grep -qx "$pkg" <<<"$pure" || { echo "pure_pkgs: $pkg imports $tensor; it must stay pure Go (DESIGN.md §1)" >&2; exit 1; }
  done
done
echo "$pure"
