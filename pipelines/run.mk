# Your own run as a Make DAG: your questions, your corpus (or retrieval server) and a
# pretrained checkpoint to a trained policy and its evaluation. Import → index (or
# RETRIEVER_URL) → SFT on rollouts you provide (optional) → ITERS RL iterations of each
# variant (rl.mk) → evaluation on your test split. For example
#   make -f pipelines/run.mk -j2 DATA=nq_hotpotqa_train.parquet TEST_DATA=nq_hotpotqa_test.parquet \
#     CORPUS=wiki-18.jsonl MODEL=/models/Qwen2.5-3B-Instruct ITERS=2 DEVICE=cuda
# Every target is a stage's commit record and every stage is cached by its key, as in
# mempo.mk: rerun the same command after a crash or a change and only what is out of date
# runs. Prompts are rendered with MODEL's own chat template (tokenizer_config.json).
#
# Layout of $(RUN_DIR):
#   data/train data/test                    the imported prompts datasets
#   index/                                  the BM25 index of CORPUS (not with RETRIEVER_URL)
#   sft/                                    SFT of MODEL on SFT_ROLLOUTS (only with it)
#   <variant>/iter-<k>/{rollouts,scores,logprobs,advantages,policy}/   RL iteration k
#   eval/                                   results.md, results.csv, plots

RUN_DIR ?= runs/mine
BIN     ?= bin
# DATA and TEST_DATA: question files, verl/Search-R1 Parquet or FlashRAG JSONL (several
# files each: space-separated).
DATA      ?=
TEST_DATA ?=
# CORPUS: a Search-R1 corpus JSONL ({"id", "contents": "\"Title\"\ntext"}), indexed here;
# or RETRIEVER_URL: a Search-R1 retrieval server (http://host:port or its /retrieve).
CORPUS        ?=
RETRIEVER_URL ?=
# MODEL: a Qwen2/Qwen2.5 checkpoint directory in HF layout (config.json, safetensors,
# tokenizer.json, tokenizer_config.json).
MODEL ?=
# SFT_ROLLOUTS: a rollouts dataset to warm-start MODEL on (mempo sft --rollouts), e.g. a
# stronger policy's rollouts filtered to its successes; empty starts RL from MODEL.
SFT_ROLLOUTS ?=
# K: objectives per prompt, K consecutive questions joined (MEM1's composition).
K ?= 1

ITERS    ?= 2
VARIANTS ?= mempo grpo
ADV_FLAGS_mempo    ?= --mem-coef 1
ADV_FLAGS_grpo     ?= --mem-coef 0
# The memory advantage on the memory's content tokens only, not its <mem> and </mem>
# tags: the tags are where a turn opens and closes its memory, a format decision the
# memory signal otherwise trains too (docs/memory-drift.md). VARIANTS="mempo grpo memcontent".
ADV_FLAGS_memcontent ?= --mem-coef 1 --mem-content-only
LOGPROB_FLAGS_grpo ?= --memory-pass=false
SEED             ?= 1
PROMPTS_PER_ITER ?= 64
RL_PROMPT_OFFSET ?= 0
IMPORT_FLAGS  ?=
SFT_FLAGS     ?= --epochs 1 --lr 1e-5
ROLLOUT_FLAGS ?= --n 8 --max-turns 4 --max-new-tokens 256
SCORE_FLAGS   ?=
LOGPROB_FLAGS ?=
UPDATE_FLAGS  ?= --lr 1e-6 --mini-batches 2
EVAL_FLAGS    ?= --max-turns 4 --max-new-tokens 256
STAGE_FLAGS   ?= --progress plain --log-level warn
PROTOCOL ?=
PROTO := $(if $(PROTOCOL),--protocol $(PROTOCOL))
DEVICE ?=
DEV := $(if $(DEVICE),--device $(DEVICE))
CODE := $(BIN)/CODE_VERSION

.DEFAULT_GOAL := run
need = $(if $(strip $($(1))),,$(error $(1) is not set: $(2) (see pipelines/run.mk)))
$(call need,DATA,the training questions)
$(call need,MODEL,the checkpoint to train)
$(if $(strip $(CORPUS)$(RETRIEVER_URL)),,$(error set CORPUS (a corpus to index) or RETRIEVER_URL (a retrieval server); see pipelines/run.mk))
ifneq ($(filter run eval eval-parts,$(or $(MAKECMDGOALS),run)),)
$(call need,TEST_DATA,the test questions the evaluation answers)
endif

TRAIN      := $(RUN_DIR)/data/train
TRAIN_MARK := $(TRAIN)/_manifest.json
TEST       := $(RUN_DIR)/data/test
$(TRAIN_MARK): $(DATA) $(CODE)
	$(BIN)/mempo import $(foreach f,$(DATA),--input $(f)) -k $(K) --split train $(IMPORT_FLAGS) $(STAGE_FLAGS) --out $(TRAIN) && touch $@
$(TEST)/_manifest.json: $(TEST_DATA) $(CODE)
	$(BIN)/mempo import $(foreach f,$(TEST_DATA),--input $(f)) -k $(K) --split test $(IMPORT_FLAGS) $(STAGE_FLAGS) --out $(TEST) && touch $@

ifneq ($(strip $(RETRIEVER_URL)),)
RETRIEVE      := --retriever-url $(RETRIEVER_URL)
RETRIEVE_MARK :=
else
INDEX         := $(RUN_DIR)/index
RETRIEVE      := --index $(INDEX)
RETRIEVE_MARK := $(INDEX)/mempo_index.json
$(RETRIEVE_MARK): $(CORPUS) $(CODE)
	$(BIN)/mempo index --corpus $(CORPUS) --out $(INDEX) && touch $@
endif

# The start: MODEL itself (a foreign directory: its config.json marks it), or its SFT.
ifneq ($(strip $(SFT_ROLLOUTS)),)
START      := $(RUN_DIR)/sft
START_MARK := $(START)/checkpoint.json
START_NAME := sft
$(START_MARK): $(MODEL)/config.json $(SFT_ROLLOUTS)/_manifest.json
	$(SFT_LAUNCH) $(BIN)/mempo sft --rollouts $(SFT_ROLLOUTS) --policy $(MODEL) --seed $(SEED) $(PROTO) $(SFT_FLAGS) $(DEV) $(STAGE_FLAGS) $(call tb,sft,0) --out $(START) && touch $@
else
START      := $(MODEL)
START_MARK := $(MODEL)/config.json
START_NAME := start
endif

TEST_KS    := $(K)
TEST_SET    = $(TEST)
TEST_MARK   = $(TEST)/_manifest.json
EVAL_TESTS := --test $(K)=$(TEST)

include $(dir $(lastword $(MAKEFILE_LIST)))rl.mk
