#!/usr/bin/env bash
# One `mempo serve-policy` on loopback and N rollout shards against it, then the merge:
#   pipelines/scaleout/rollout-loopback.sh POLICY PROMPTS INDEX OUT [N]
# The policy is loaded once, by the server, which batches the shards' requests
# continuously; each shard computes its slice into OUT/_parts/i-of-N/ and the merge
# builds one dataset. With SERVE_FLAGS=--max-batch=1 every row equals an unsharded
# `mempo-rollout --engine local --max-batch 1` run's, log-probs to the bit, so the
# dataset digest is the same; with batching the tokens are the same and log-probs may
# differ in the last bits. Environment: BIN (bin), PORT (8000), SERVE_FLAGS (extra
# serve-policy flags) and ROLLOUT_FLAGS (extra mempo-rollout flags, the same for every
# shard and the merge).
set -euo pipefail
(($# >= 4)) || { echo "usage: $0 POLICY PROMPTS INDEX OUT [N]" >&2; exit 2; }
policy=$1 prompts=$2 index=$3 out=$4 n=${5:-4}
bin=${BIN:-bin} port=${PORT:-8000}
url=http://127.0.0.1:$port

# shellcheck disable=SC2086 # the *_FLAGS are lists of words
"$bin/mempo" serve-policy --policy "$policy" --served-model-name policy --addr "127.0.0.1:$port" ${SERVE_FLAGS:-} &
server=$!
trap 'kill "$server" 2>/dev/null; wait "$server" 2>/dev/null || true' EXIT
# The server listens once the policy is loaded.
until (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do
  kill -0 "$server" 2>/dev/null || { echo "$0: serve-policy exited before listening on $url" >&2; exit 1; }
  sleep 0.2
done

# shellcheck disable=SC2206
args=(--prompts "$prompts" --policy "$policy" --index "$index" --out "$out"
      --engine server --engine-url "$url" --engine-model policy ${ROLLOUT_FLAGS:-})
pids=()
for ((i = 0; i < n; i++)); do
  "$bin/mempo-rollout" "${args[@]}" --shard "$i/$n" &
  pids+=($!)
done
failed=0
for p in "${pids[@]}"; do
  wait "$p" || failed=1
done
((failed == 0)) || { echo "$0: a rollout shard failed" >&2; exit 1; }
"$bin/mempo-rollout" "${args[@]}" --merge "$n"
