#!/usr/bin/env bash
# torchrun: one iteration's update trained by NPROC ranks on each of NNODES machines,
# data parallel over libtorch's c10d. Run it on every machine with the same RUN, and
# NODE_RANK 0 on the machine at MASTER_ADDR:
#   NNODES=2 NODE_RANK=0 MASTER_ADDR=node0 RUN=/shared/runs/demo pipelines/scaleout/update-torchrun.sh [FLAGS]
# FLAGS go to mempo-update after the script's own (the run's UPDATE_FLAGS, say).
# torchrun starts the ranks (--no-python: mempo-update is no Python script) and sets
# their WORLD_SIZE, RANK, MASTER_ADDR and MASTER_PORT; mempo-update joins them through
# torchrun's own store. On one machine, NNODES=1 trains with NPROC local ranks.
# pipelines/mempo.mk does the same for every update with LAUNCH="torchrun ... --no-python".
set -euo pipefail

RUN=${RUN:-runs/demo}
NNODES=${NNODES:-1}
NPROC=${NPROC:-2}
BIN=${BIN:-bin}
exec torchrun --nnodes "$NNODES" --nproc-per-node "$NPROC" --node-rank "${NODE_RANK:-0}" \
  --master-addr "${MASTER_ADDR:-127.0.0.1}" --master-port "${MASTER_PORT:-29500}" --no-python \
  "$BIN/mempo-update" --policy "$RUN/sft" --ref "$RUN/sft" \
  --rollouts "$RUN/mempo/iter-1/rollouts" --logprobs "$RUN/mempo/iter-1/logprobs" \
  --advantages "$RUN/mempo/iter-1/advantages" --seed 1001 \
  --world-size $((NNODES * NPROC)) --threads "${THREADS:-1}" --out "$RUN/mempo/iter-1/policy-ranks" "$@"
