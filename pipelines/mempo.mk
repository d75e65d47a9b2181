# One MemPO run on the embedded synthetic task as a Make DAG (DESIGN.md §5): the task,
# its index, an initial model and SFT on the oracle, then rl.mk's RL iterations and
# evaluation. Every target is a stage's commit record (_manifest.json, checkpoint.json,
# …), so `make` reruns exactly what is out of date; each stage is also cached by its own
# key, so a rerun after a crash resumes and an unchanged stage is a cache hit. Include
# this file after setting the variables below (pipelines/demo.mk does;
# pipelines/experiment.mk runs it once per seed), or pass them on the command line. Your
# own data and checkpoint: pipelines/run.mk.
#
# Layout of runs/<run>:
#   task/ index/ init/ sft/                      task, search index, initial model, SFT warm start
#   <variant>/iter-<k>/{rollouts,scores,logprobs,advantages,policy}/   RL iteration k
#   eval/                                        results.md, results.csv, plots

BIN      ?= bin
RUN_DIR  ?= runs/demo
ITERS    ?= 2
VARIANTS ?= mempo grpo
# Advantage flags per variant: GRPO is MemPO without the memory advantage.
ADV_FLAGS_mempo ?= --mem-coef 1
ADV_FLAGS_grpo  ?= --mem-coef 0
# The memory advantage on the memory's content tokens only, not its <mem> and </mem>
# tags: the tags are where a turn opens and closes its memory, a format decision the
# memory signal otherwise trains too (docs/memory-drift.md). VARIANTS="mempo grpo memcontent".
ADV_FLAGS_memcontent ?= --mem-coef 1 --mem-content-only
# GRPO needs no P_mem/P_full: its log-prob stage skips the memory pass.
LOGPROB_FLAGS_grpo ?= --memory-pass=false

TASK_FLAGS     ?=
# The task's test sets, by objective count (gen-task --test-k): each policy is evaluated on
# each in a process of its own, so `make -j` spreads the evaluations over the cores.
TEST_K         ?= 2,4,6
INIT_FLAGS     ?=
SFT_FLAGS      ?=
ROLLOUT_FLAGS  ?= --n 8 --max-turns 8 --max-new-tokens 64
PROMPTS_PER_ITER ?= 16
# Iteration k takes the PROMPTS_PER_ITER training prompts from RL_PROMPT_OFFSET + (k-1)·PROMPTS_PER_ITER,
# so RL sees prompts that SFT's --questions did not when the offset skips them.
RL_PROMPT_OFFSET ?= 0
SCORE_FLAGS    ?=
LOGPROB_FLAGS  ?=
UPDATE_FLAGS   ?= --lr 1e-5 --mini-batches 2
EVAL_FLAGS     ?= --max-turns 8 --max-new-tokens 64
STAGE_FLAGS    ?= --progress plain --log-level warn
SEED           ?= 1
# PROTOCOL, when set, is the turn format every stage uses (tags, prompt); see agent/protocol.
PROTOCOL       ?=
PROTO := $(if $(PROTOCOL),--protocol $(PROTOCOL))
# DEVICE, when set, is where the tensor stages (SFT, rollout, log-probs, update) run: cpu,
# cuda or cuda:N. For a GPU, BIN must hold the CUDA build (make build CUDA=1: BIN=bin/cuda).
DEVICE         ?=
DEV := $(if $(DEVICE),--device $(DEVICE))
# TB_DIR, when set, is a TensorBoard log directory for the run's metrics: SFT's in
# TB_DIR/sft at step 0, each variant's RL iterations in TB_DIR/<variant> at step k (rl.mk).
# DTYPE, when set, is the precision SFT trains in and writes, and so every later stage's
# (each keeps its checkpoint's): float32, bfloat16 (with float32 master weights in
# AdamW, carried from checkpoint to checkpoint) or float16. Empty keeps the initial model's.
DTYPE          ?=

# TASK and INDEX may live outside the run: an experiment shares one task across seeds.
TASK  ?= $(RUN_DIR)/task
INDEX ?= $(RUN_DIR)/index
TASK_SEED ?= $(SEED)
INIT  := $(RUN_DIR)/init
SFT   := $(RUN_DIR)/sft
EVAL  := $(RUN_DIR)/eval
TRAIN := $(TASK)/prompts-train

# CODE changes when the binaries' source does, so a code change reruns the DAG (each
# stage then decides by its key whether to recompute).
CODE := $(BIN)/CODE_VERSION

comma := ,
TEST_KS = $(subst $(comma), ,$(TEST_K))

$(TASK)/task.json: $(CODE)
	$(BIN)/mempo gen-task --seed $(TASK_SEED) --test-k $(TEST_K) $(TASK_FLAGS) $(STAGE_FLAGS) --out $(TASK) && touch $@

$(INDEX)/mempo_index.json: $(TASK)/task.json
	$(BIN)/mempo index --corpus $(TASK)/corpus.jsonl --out $(INDEX) && touch $@

$(INIT)/checkpoint.json: $(TASK)/task.json $(PROTOCOL)
	$(BIN)/mempo init-model --corpus $(TASK)/corpus.jsonl --prompts $(TRAIN) --seed $(SEED) $(PROTO) $(INIT_FLAGS) --out $(INIT) && touch $@

$(SFT)/checkpoint.json: $(INIT)/checkpoint.json $(INDEX)/mempo_index.json
	$(SFT_LAUNCH) $(BIN)/mempo sft --task $(TASK) --index $(INDEX) --policy $(INIT) --seed $(SEED) $(PROTO) $(SFT_FLAGS) $(if $(DTYPE),--dtype $(DTYPE)) $(DEV) $(STAGE_FLAGS) $(call tb,sft,0) --out $(SFT) && touch $@

# What rl.mk's iterations and evaluation run on: the task's prompts and index, the SFT model.
START      := $(SFT)
START_MARK := $(SFT)/checkpoint.json
TRAIN_MARK := $(TASK)/task.json
RETRIEVE      := --index $(INDEX)
RETRIEVE_MARK := $(INDEX)/mempo_index.json
TEST_SET   = $(TASK)/prompts-test-k$(1)
TEST_MARK  = $(TASK)/task.json
EVAL_TESTS := --task $(TASK)

include $(dir $(lastword $(MAKEFILE_LIST)))rl.mk
