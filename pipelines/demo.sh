#!/usr/bin/env bash
# The embedded-default demo (DESIGN.md §8). It grows with the stages: today it runs
# what exists end to end and names what is still missing.
set -euo pipefail
cd "$(dirname "$0")/.."
echo "== mempo demo"
bin/mempo version
echo
echo "Stages not built yet: task generation and index (issue 5), tiny model and tokenizer (issue 4),"
echo "SFT and PPO update (issue 7), rollout (issue 5), scoring/log-prob/advantage (issue 6),"
echo "evaluation and the results table (issue 8)."
