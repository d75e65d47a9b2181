# The rollout stage of one policy through one `mempo serve-policy` on loopback, split
# over SHARDS rollout processes that share it (pipelines/scaleout/rollout-loopback.sh):
# the policy is loaded once and the server batches every shard's requests. The target
# is the merged dataset's manifest, so make reruns it only when the policy or the code
# changes, and the stage's cache makes a rerun after a crash resume.
#
#   make -f pipelines/serve.mk POLICY=runs/demo/sft PROMPTS=runs/demo/task/prompts-train \
#        INDEX=runs/demo/index OUT=runs/demo/served/rollouts SHARDS=4
#
# SERVE_FLAGS=--max-batch=1 makes the rows equal an unsharded in-process run's to the bit
# (pipelines/pipeline_test.go checks the digest); by default the server batches up to 64
# requests and the tokens are equal, log-probs to the last bits.

BIN     ?= bin
SHARDS  ?= 4
PORT    ?= 8000
POLICY  ?= runs/demo/sft
PROMPTS ?= runs/demo/task/prompts-train
INDEX   ?= runs/demo/index
OUT     ?= runs/demo/served/rollouts
SERVE_FLAGS   ?=
ROLLOUT_FLAGS ?= --n 8 --max-turns 8 --max-new-tokens 64

LOOPBACK := $(dir $(lastword $(MAKEFILE_LIST)))scaleout/rollout-loopback.sh

run: $(OUT)/_manifest.json

$(OUT)/_manifest.json: $(POLICY)/checkpoint.json $(BIN)/CODE_VERSION
	BIN=$(BIN) PORT=$(PORT) SERVE_FLAGS='$(SERVE_FLAGS)' ROLLOUT_FLAGS='$(ROLLOUT_FLAGS)' \
	  $(LOOPBACK) $(POLICY) $(PROMPTS) $(INDEX) $(OUT) $(SHARDS) && touch $@

.PHONY: run
