#!/usr/bin/env bash
# Print the install prefix of Slurm's daemons and commands for the Slurm test
# (pipelines/slurm_test.go) on stdout, nothing else: the directory whose sbin/ holds
# slurmctld and slurmd and whose bin/ holds sbatch. MEMPO_SLURM names one; else the
# slurmctld on PATH (or in /usr/sbin) gives it; else, when running as root with apt-get,
# Debian's slurmctld, slurmd, slurm-client and munge are installed once (bookworm:
# Slurm 22.05, 8 packages, about 10 s with the package lists present). Without Slurm it
# prints nothing and says in one line on stderr why the test will be skipped; it never
# fails. The test's daemons run as root (slurmd starts each job as its submitter), so
# a user without root gains nothing from an unpacked copy.
set -uo pipefail

prefix_of() { # the prefix of a slurmctld path: /usr/sbin/slurmctld -> /usr
  local d
  d=$(dirname "$(readlink -f "$1")")
  dirname "$d"
}
usable() { [[ -x $1/sbin/slurmctld && -x $1/sbin/slurmd && -x $1/bin/sbatch ]]; }

if [[ -n ${MEMPO_SLURM:-} ]]; then
  usable "$MEMPO_SLURM" || echo "slurm: MEMPO_SLURM=$MEMPO_SLURM lacks sbin/slurmctld, sbin/slurmd or bin/sbatch; the Slurm test will fail" >&2
  echo "$MEMPO_SLURM"
  exit 0
fi
for c in "$(command -v slurmctld 2>/dev/null)" /usr/sbin/slurmctld /usr/local/sbin/slurmctld; do
  if [[ -n $c && -x $c ]] && usable "$(prefix_of "$c")"; then
    prefix_of "$c"
    exit 0
  fi
done
if [[ $(id -u) != 0 ]] || ! command -v apt-get >/dev/null; then
  echo "slurm: no slurmctld, slurmd and sbatch here and no root apt-get to install them; the Slurm test will be skipped" >&2
  exit 0
fi
echo "slurm: installing Debian's slurmctld, slurmd, slurm-client and munge with apt-get (once, for the Slurm test)" >&2
export DEBIAN_FRONTEND=noninteractive
install() { apt-get install -y -qq --no-install-recommends slurmctld slurmd slurm-client munge >/dev/null 2>&1; }
# A fresh image has no package lists: fetch them once if the first try finds no package.
install || { apt-get update -qq >/dev/null 2>&1 && install; }
if usable /usr; then
  echo /usr
  exit 0
fi
echo "slurm: apt-get install slurmctld slurmd slurm-client munge failed; the Slurm test will be skipped" >&2
exit 0
