# The embedded-default demo (DESIGN.md §8): a synthetic task, a tiny Qwen2 model, SFT
# on an imperfect oracle, MemPO and GRPO iterations, and an evaluation of the SFT start,
# both RL variants and the full-context agent. Sized for about 8 minutes on 2 cores with
# `make -j2` (the Makefile's demo target; about 19 where SFT trains in float32, see
# DTYPE in embedded.mk): SFT takes both cores, then the two RL variants
# and the evaluations run side by side on one thread each. One seed: its table's
# intervals are over test questions only; pipelines/experiment.mk runs several seeds.
RUN_DIR ?= runs/demo

include pipelines/embedded.mk
include pipelines/mempo.mk
