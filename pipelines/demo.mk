# The embedded-default demo (DESIGN.md §8): a synthetic task, a tiny Qwen2 model, SFT
# on an imperfect oracle, MemPO and GRPO iterations, and an evaluation of the SFT start,
# both RL variants and the full-context agent. Sized for about 15 minutes on 2 cores.
RUN_DIR  ?= runs/demo
SEED     ?= 1
PROTOCOL ?= pipelines/demo-protocol.json
ITERS    ?= 2
VARIANTS ?= mempo grpo

TASK_FLAGS    ?= --train 400 --test 24
INIT_FLAGS    ?= --preset tiny
# About 9 minutes: 656 steps of 4096 tokens take held-out loss from 7.2 to 0.55, enough for the
# tiny model to follow the protocol (0% invalid turns on K=2) though rarely to answer right.
SFT_FLAGS     ?= --questions 300 --epochs 8 --lr 4e-3 --schedule linear --warmup-steps 20 --batch-tokens 4096 --max-turns 8 --threads 2
PROMPTS_PER_ITER ?= 8
# em-mean gives partial credit per objective: with em-all nearly every group of the tiny
# model is all-zero and carries no outcome signal.
SCORE_FLAGS   ?= --reward em-mean
ROLLOUT_FLAGS ?= --n 8 --max-turns 8 --max-new-tokens 64 --prompts-per-shard 8 --threads 1
LOGPROB_FLAGS ?= --threads 1
UPDATE_FLAGS  ?= --lr 1e-4 --mini-batches 2 --threads 1
EVAL_FLAGS    ?= --limit 16 --max-turns 8 --max-new-tokens 64 --threads 1

include pipelines/mempo.mk
