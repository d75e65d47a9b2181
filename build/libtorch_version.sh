#!/usr/bin/env bash
# Print the version (major.minor.patch) of the libtorch in directory $1, read from its
# headers: torch/headeronly/version.h in recent releases (2.11, 2.15), torch/csrc/api/
# include/torch/version.h in older ones (2.1). Prints nothing when neither says.
for h in include/torch/headeronly/version.h include/torch/csrc/api/include/torch/version.h; do
  [[ -f $1/$h ]] || continue
  ver=$(sed -n 's/^#define TORCH_VERSION_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\)/\2/p' "$1/$h" | paste -sd.)
  [[ -n $ver ]] && { echo "$ver"; exit 0; }
done
exit 0
