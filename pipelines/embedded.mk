# The embedded default's settings (DESIGN.md §8), shared by the demo (demo.mk) and the
# experiment harness (experiment.mk): a synthetic task, a tiny Qwen2 model trained from
# scratch, SFT on an imperfect oracle, then MemPO and GRPO iterations. Every value is a
# default (?=), so a command-line or environment setting wins.
SEED     ?= 1
PROTOCOL ?= pipelines/demo-protocol.json
ITERS    ?= 4
VARIANTS ?= mempo grpo

# Years are digit-by-digit tokens the tiny model copies poorly: they stay in the documents
# but are never asked. Fewer two-hop objectives than the default leave room to learn.
TASK_FLAGS    ?= --train 3000 --test 48 --no-year-questions --two-hop-rate 0.25
INIT_FLAGS    ?= --preset tiny
# One pass over SFT_QUESTIONS oracle trajectories (about 4 minutes in bfloat16, 8 in
# float32). A small weight on the context tokens' NLL teaches the from-scratch model its
# corpus and copying from context, which the response tokens alone do not within this
# budget (held-out NLL 7.22 → 0.22). `--threads 1 --procs 2` trains about 1.1x as fast
# here (README, "Training in several processes") but, its gradients summed in another order,
# into another model whose table and RL phase differ; the demo keeps the table the
# README shows.
SFT_QUESTIONS ?= 2400
SFT_FLAGS     ?= --questions $(SFT_QUESTIONS) --epochs 1 --lr 4e-3 --schedule linear --warmup-steps 20 \
  --batch-tokens 4096 --max-turns 8 --context-loss-weight 0.2 --threads 2
# bfloat16 where the CPU multiplies it natively (AVX512-BF16 or AMX-BF16): there the
# tiny model's matrix products run 2.4-3.9x faster than in float32 and the demo takes
# about 8 minutes instead of 19 (README). Elsewhere float32: without those instructions
# a bfloat16 product saves no time. SFT trains in it; the RL stages keep their
# checkpoint's precision. Probed once (experiment.mk exports every variable to each
# recipe, which would rerun a recursive $(shell)); a command-line or environment DTYPE wins.
ifeq ($(origin DTYPE),undefined)
DTYPE := $(shell grep -qwE 'avx512_bf16|amx_bf16' /proc/cpuinfo 2>/dev/null && echo bfloat16 || echo float32)
endif
# RL takes prompts SFT did not clone.
RL_PROMPT_OFFSET ?= $(SFT_QUESTIONS)
PROMPTS_PER_ITER ?= 16
# em-mean gives partial credit per objective; sampling at temperature 0.5 (scored and
# trained at the same) keeps the tiny model's rollouts on format (91% valid, mean reward
# 0.16, against 56% and 0.05 at temperature 1).
SCORE_FLAGS   ?= --reward em-mean
ROLLOUT_FLAGS ?= --n 8 --max-turns 8 --max-new-tokens 64 --prompts-per-shard 16 --temperature 0.5 --threads 1
LOGPROB_FLAGS ?= --temperature 0.5 --threads 1
UPDATE_FLAGS  ?= --lr 2e-4 --mini-batches 2 --temperature 0.5 --threads 1
# Evaluations run in the training precision. (libtorch 2.1.2's bfloat16 products decoded
# wrongly or crashed on AVX512-BF16 CPUs, so evaluations ran in float32 until libtorch
# 2.11.0, where build/bf16_repro.sh's reproducers run clean: README, known issues.)
EVAL_DTYPE    ?= $(DTYPE)
EVAL_FLAGS    ?= --limit 32 --max-turns 8 --max-new-tokens 64 --threads 1 --dtype $(EVAL_DTYPE)
