#!/usr/bin/env bash
# One RL iteration on Slurm: rl.mk's stages of iteration ITER as batch jobs chained with
# dependencies (afterok), submitted at once from a login node:
#   RUN=/shared/runs/demo pipelines/scaleout/iteration-submit.sh
#
#   rollout     rollout-array.slurm  SHARDS array tasks, one GPU each: the parts
#   merge       cpu-stage.slurm      one task, no GPU, once every array task succeeded
#   score       cpu-stage.slurm      after the merge
#   logprob     logprob.slurm        one GPU, after the merge (beside the score)
#   advantage   cpu-stage.slurm      after the score and the log-probs
#   update      update-2node.slurm   2 nodes, one rank each, after the advantages
#
# Every job runs the command rl.mk runs for that stage (same flags, seeds and prompt
# slice), so the merged rollouts' digest equals an unsharded run's and every later
# dataset is make's. A job that fails cancels the jobs after it (--kill-on-invalid-dep).
# Prints one line per job, "STAGE JOBID", on stdout.
#
# Environment (defaults in brackets; paths as the nodes see the shared file system):
#   RUN [runs/demo]          the run: task/, index/, sft/ as pipelines/mempo.mk writes them
#   VARIANT [mempo] ITER [1] ITER_DIR [RUN/VARIANT/iter-ITER]: where the stages write
#   POLICY                   the policy to roll out [RUN/sft, or the previous iteration's]
#   REF [RUN/sft]  PROMPTS [RUN/task/prompts-train]  RETRIEVE [--index RUN/index]
#   SEED [1] PROMPTS_PER_ITER [16] RL_PROMPT_OFFSET [0]   as in rl.mk
#   SHARDS [8]               rollout array tasks
#   DEVICE [cuda]            --device of the rollout, log-prob and update stages
#   PROTOCOL ROLLOUT_FLAGS SCORE_FLAGS LOGPROB_FLAGS UPDATE_FLAGS STAGE_FLAGS  as in rl.mk
#   ADV_FLAGS [--mem-coef 1] (GRPO: ADV_FLAGS=--mem-coef 0 LOGPROB_FLAGS=--memory-pass=false)
#   AFTER                    a job the iteration waits for (afterok): the previous
#                            iteration's update, to chain iterations
#   BIN                      a directory of the binaries, put first on the jobs' PATH
#   SBATCH_FLAGS             more sbatch flags for every job (--partition, --account, …)
#   LOGS [ITER_DIR/slurm]    the jobs' output files
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)

RUN=${RUN:-runs/demo}
VARIANT=${VARIANT:-mempo}
ITER=${ITER:-1}
[[ $ITER =~ ^[1-9][0-9]*$ ]] || { echo "$0: ITER=$ITER: want an iteration number from 1" >&2; exit 2; }
ITER_DIR=${ITER_DIR:-$RUN/$VARIANT/iter-$ITER}
if ((ITER == 1)); then
  POLICY=${POLICY:-$RUN/sft}
else
  POLICY=${POLICY:-$RUN/$VARIANT/iter-$((ITER - 1))/policy}
fi
REF=${REF:-$RUN/sft}
PROMPTS=${PROMPTS:-$RUN/task/prompts-train}
RETRIEVE=${RETRIEVE:---index $RUN/index}
SEED=${SEED:-1}
PROMPTS_PER_ITER=${PROMPTS_PER_ITER:-16}
RL_PROMPT_OFFSET=${RL_PROMPT_OFFSET:-0}
SHARDS=${SHARDS:-8}
[[ $SHARDS =~ ^[1-9][0-9]*$ ]] || { echo "$0: SHARDS=$SHARDS: want a task count from 1" >&2; exit 2; }
DEVICE=${DEVICE:-cuda}
ADV_FLAGS=${ADV_FLAGS:---mem-coef 1}
LOGS=${LOGS:-$ITER_DIR/slurm}
command -v sbatch >/dev/null || { echo "$0: sbatch not found: run this where Slurm's commands are" >&2; exit 1; }
if [[ -n ${BIN:-} ]]; then
  [[ -x $BIN/mempo-rollout ]] || { echo "$0: BIN=$BIN has no mempo-rollout" >&2; exit 1; }
  PATH=$(cd "$BIN" && pwd):$PATH
  export PATH
fi
mkdir -p "$LOGS" # Slurm opens the output files before a job starts

proto=()
[[ -n ${PROTOCOL:-} ]] && proto=(--protocol "$PROTOCOL")
# shellcheck disable=SC2206 # the *_FLAGS and RETRIEVE are lists of words, as in rl.mk
{
  stage=(${STAGE_FLAGS:-})
  rollout=(--prompts "$PROMPTS" --policy "$POLICY" $RETRIEVE
    --prompt-offset $((RL_PROMPT_OFFSET + (ITER - 1) * PROMPTS_PER_ITER)) --prompt-limit "$PROMPTS_PER_ITER"
    --seed $((SEED * 1000 + ITER)) "${proto[@]}" ${ROLLOUT_FLAGS:-} --device "$DEVICE" "${stage[@]}" --out "$ITER_DIR/rollouts")
  score=(--rollouts "$ITER_DIR/rollouts" --prompts "$PROMPTS" "${proto[@]}" ${SCORE_FLAGS:-} "${stage[@]}" --out "$ITER_DIR/scores")
  logprob=(--rollouts "$ITER_DIR/rollouts" --prompts "$PROMPTS" --policy "$POLICY" --ref "$REF"
    "${proto[@]}" ${LOGPROB_FLAGS:-} --device "$DEVICE" "${stage[@]}" --out "$ITER_DIR/logprobs")
  advantage=(--rollouts "$ITER_DIR/rollouts" --scores "$ITER_DIR/scores" --logprobs "$ITER_DIR/logprobs"
    $ADV_FLAGS "${stage[@]}" --out "$ITER_DIR/advantages")
  update=(--policy "$POLICY" --ref "$REF" --rollouts "$ITER_DIR/rollouts" --logprobs "$ITER_DIR/logprobs"
    --advantages "$ITER_DIR/advantages" --seed $((SEED * 1000 + ITER)) ${UPDATE_FLAGS:-} --device "$DEVICE"
    "${stage[@]}" --out "$ITER_DIR/policy")
  extra=(${SBATCH_FLAGS:-})
}

# submit NAME AFTER SBATCH-ARGS...: submits one job (after the jobs AFTER, colon-separated,
# succeeded), prints "NAME JOBID" and sets $job.
submit() {
  local name=$1 after=$2 out
  shift 2
  local dep=()
  [[ -n $after ]] && dep=(--dependency="afterok:$after" --kill-on-invalid-dep=yes)
  out=$(sbatch --parsable --export=ALL "${dep[@]}" "${extra[@]}" "$@") || {
    echo "$0: sbatch for the $name job failed" >&2
    exit 1
  }
  job=${out%%;*} # --parsable prints JOBID or JOBID;CLUSTER
  echo "$name $job"
}

tag=$VARIANT-$ITER
submit rollout "${AFTER:-}" --array="0-$((SHARDS - 1))" --job-name="mempo-rollout-$tag" \
  --output="$LOGS/rollout-%A_%a.out" "$here/rollout-array.slurm" "${rollout[@]}"
rollout_job=$job
submit merge "$rollout_job" --job-name="mempo-merge-$tag" --output="$LOGS/merge-%j.out" \
  "$here/cpu-stage.slurm" mempo-rollout "${rollout[@]}" --merge "$SHARDS"
merge_job=$job
submit score "$merge_job" --job-name="mempo-score-$tag" --output="$LOGS/score-%j.out" \
  "$here/cpu-stage.slurm" mempo-score "${score[@]}"
score_job=$job
submit logprob "$merge_job" --job-name="mempo-logprob-$tag" --output="$LOGS/logprob-%j.out" \
  "$here/logprob.slurm" "${logprob[@]}"
logprob_job=$job
submit advantage "$score_job:$logprob_job" --job-name="mempo-advantage-$tag" --output="$LOGS/advantage-%j.out" \
  "$here/cpu-stage.slurm" mempo-advantage "${advantage[@]}"
advantage_job=$job
submit update "$advantage_job" --job-name="mempo-update-$tag" --output="$LOGS/update-%j.out" \
  "$here/update-2node.slurm" "${update[@]}"
