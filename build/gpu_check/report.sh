# write_report prints the markdown report of build/gpu_check/run.sh from what the
# sections left in $STATE.

# field SECTION EXT [DEFAULT]: the content of $STATE/SECTION.EXT, or DEFAULT.
field() { cat "$STATE/$1.$2" 2>/dev/null || echo "${3:-}"; }

# why SECTION: why the section has no part in the report.
why() {
  if [[ -f $STATE/$1.status ]]; then
    echo "(not run: $(field "$1" note))"
  else
    echo "(not run: not in GPU_CHECK_SECTIONS)"
  fi
}

write_report() {
  local s total=$(($(date +%s) - START_EPOCH)) rev gpu
  if [[ -f $ROOT/REVISION ]]; then # a bundle: no git there
    rev="$(cat "$ROOT/REVISION") (prebuilt bundle)"
  else
    rev=$(git -C "$ROOT" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
    git -C "$ROOT" diff --quiet HEAD 2>/dev/null || rev+=-dirty
  fi
  gpu=$(gpus | head -1)
  echo "# mempo GPU check"
  echo
  echo "$(date -u '+%Y-%m-%d %H:%M UTC'), revision $rev, on $(hostname) ($(nproc) cores${gpu:+; $gpu})."
  echo "Device under test: **$GPU_CHECK_DEVICE**; $total s of a ${BUDGET} s budget."
  if ! cuda; then
    echo "CPU fallback mode (GPU_CHECK_DEVICE=cpu): the parity tests compare the CPU with itself on the tiny"
    echo "preset only, and the benchmarks are the tiny ones; it exercises the check, not a GPU."
  fi
  echo
  echo "| section | status | seconds | note |"
  echo "|---|---|---|---|"
  for s in libtorch build parity demo bench torch; do
    [[ -f $STATE/$s.status ]] || continue
    echo "| $s | $(field "$s" status) | $(field "$s" secs) | $(field "$s" note | tr '|' '/') |"
  done

  echo
  echo "## Parity: $GPU_CHECK_DEVICE against the CPU"
  echo
  echo "model/qwen2 TestDeviceParity and train TestDeviceParityUpdate build the same randomly initialised"
  echo "model on both sides (the tiny preset and, unless -short, Qwen2.5-0.5B's widths with 2 layers), in"
  echo "float32 and in bfloat16 on both. Logits: a right-padded batch of 4 rows; log-probs and entropies:"
  echo "LogProbs and PrefixLogProbs (the log-prob stage's path) over 8 pairs in 2 prompt groups; greedy: 16"
  echo "tokens for 4 prompts, each token's CPU logit (teacher-forced on the device's tokens) within the"
  echo "tolerance of the CPU's largest, and Generate's log-probs against the CPU's LogProbs; update: one"
  echo "PPO step (forward, backward, AdamW at LR 1e-3) — loss and gradient norm relative, parameters (float32"
  echo "masters for bfloat16) in units of the LR. Tolerances: logits and logit gaps scale with"
  echo "max(1, max |logit|); log-probs and entropies are absolute."
  echo
  field parity md "$(why parity)"

  echo
  echo "## One RL iteration on $GPU_CHECK_DEVICE"
  echo
  field demo md "$(why demo)"

  echo
  echo "## Throughput: mempo and PyTorch eager on $GPU_CHECK_DEVICE"
  echo
  echo "Go benchmarks $(echo "$BENCH_QWEN2|$BENCH_UPDATE" | tr '|' ' ') at threads=$BENCH_THREADS,"
  echo "MEMPO_TEST_DTYPE=$BENCH_DTYPE, $ITERS timed iteration(s) after a warm-up, each next to the same workload"
  echo "in build/bench_compare/compare.py --device $GPU_CHECK_DEVICE --dtype $BENCH_DTYPE. The 0.5B and 1.5B shapes"
  echo "have Qwen2.5's widths and vocabulary with 2 layers (random weights). Log-probs: 16 pairs of 192"
  echo "context and 64 response tokens; decode: 32 new tokens (top-p 0.9) for 16 or 64 prompts of 64;"
  echo "update: 2 turns of 192+64 tokens, forward, backward and AdamW (mempo keeps float32 master weights"
  echo "for bfloat16 parameters; PyTorch's AdamW updates them in bfloat16, with its multi-tensor kernels)."
  echo
  field torch md "$(why torch)"

  echo
  echo "## Logs"
  echo
  for s in libtorch build parity demo bench torch; do
    [[ -f $LOGS/$s.log ]] && echo "- $s: $LOGS/$s.log"
  done
}
