# One MemPO run as a Make DAG (DESIGN.md §5). Every target is a stage's commit record
# (_manifest.json, checkpoint.json, …), so `make` reruns exactly what is out of date;
# each stage is also cached by its own key, so a rerun after a crash resumes and an
# unchanged stage is a cache hit. Include this file after setting the variables below
# (pipelines/demo.mk does; pipelines/experiment.mk runs it once per seed), or pass them on
# the command line.
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
	$(BIN)/mempo sft --task $(TASK) --index $(INDEX) --policy $(INIT) --seed $(SEED) $(PROTO) $(SFT_FLAGS) $(if $(DTYPE),--dtype $(DTYPE)) $(DEV) $(STAGE_FLAGS) --out $(SFT) && touch $@

# policy_dir(variant, k): the policy iteration k+1 starts from (k = 0: the SFT model).
policy_dir = $(if $(filter 0,$(2)),$(SFT),$(RUN_DIR)/$(1)/iter-$(2)/policy)
prev       = $(word $(1),0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19)

# rollouts(variant, k): the rollouts of RL iteration k of a variant.
define rollouts
$(RUN_DIR)/$(1)/iter-$(2)/rollouts/_manifest.json: $(call policy_dir,$(1),$(call prev,$(2)))/checkpoint.json $(INDEX)/mempo_index.json
	$(BIN)/mempo-rollout --prompts $(TRAIN) --policy $(call policy_dir,$(1),$(call prev,$(2))) --index $(INDEX) \
	  --prompt-offset $$$$(( $(RL_PROMPT_OFFSET) + ($(2) - 1) * $(PROMPTS_PER_ITER) )) --prompt-limit $(PROMPTS_PER_ITER) \
	  --seed $$$$(( $(SEED) * 1000 + $(2) )) $(PROTO) $(ROLLOUT_FLAGS) $(DEV) $(STAGE_FLAGS) --out $$(@D) && touch $$@
endef

# first_rollouts(variant): iteration 1 rolls the SFT policy out for every variant with the
# same prompts, seed and flags, so a variant after the first takes a copy of the first's
# rollouts, the bytes its own rollout stage would write. (Rollout flags of a variant's
# own would need a stage run of its own.)
define first_rollouts
$(RUN_DIR)/$(1)/iter-1/rollouts/_manifest.json: $(RUN_DIR)/$(FIRST_VARIANT)/iter-1/rollouts/_manifest.json
	rm -rf $$(@D) $$(@D).copy && mkdir -p $$(dir $$(@D)) && cp -r $$(<D) $$(@D).copy && mv $$(@D).copy $$(@D)
endef

# iteration(variant, k): the other four stages of RL iteration k of a variant.
define iteration
$(1)_ITER_$(2) := $(RUN_DIR)/$(1)/iter-$(2)
$$($(1)_ITER_$(2))/scores/_manifest.json: $$($(1)_ITER_$(2))/rollouts/_manifest.json
	$(BIN)/mempo-score --rollouts $$(<D) --prompts $(TRAIN) $(PROTO) $(SCORE_FLAGS) $(SCORE_FLAGS_$(1)) $(STAGE_FLAGS) --out $$(@D) && touch $$@
$$($(1)_ITER_$(2))/logprobs/_manifest.json: $$($(1)_ITER_$(2))/rollouts/_manifest.json $(SFT)/checkpoint.json
	$(BIN)/mempo-logprob --rollouts $$(<D) --prompts $(TRAIN) --policy $(call policy_dir,$(1),$(call prev,$(2))) --ref $(SFT) \
	  $(PROTO) $(LOGPROB_FLAGS) $(LOGPROB_FLAGS_$(1)) $(DEV) $(STAGE_FLAGS) --out $$(@D) && touch $$@
$$($(1)_ITER_$(2))/advantages/_manifest.json: $$($(1)_ITER_$(2))/scores/_manifest.json $$($(1)_ITER_$(2))/logprobs/_manifest.json
	$(BIN)/mempo-advantage --rollouts $$($(1)_ITER_$(2))/rollouts --scores $$($(1)_ITER_$(2))/scores \
	  --logprobs $$($(1)_ITER_$(2))/logprobs $(ADV_FLAGS_$(1)) $(STAGE_FLAGS) --out $$(@D) && touch $$@
$$($(1)_ITER_$(2))/policy/checkpoint.json: $$($(1)_ITER_$(2))/advantages/_manifest.json
	$(BIN)/mempo-update --policy $(call policy_dir,$(1),$(call prev,$(2))) --ref $(SFT) \
	  --rollouts $$($(1)_ITER_$(2))/rollouts --logprobs $$($(1)_ITER_$(2))/logprobs --advantages $$($(1)_ITER_$(2))/advantages \
	  --seed $$$$(( $(SEED) * 1000 + $(2) )) $(UPDATE_FLAGS) $(DEV) $(STAGE_FLAGS) --out $$(@D) && touch $$@
endef

ITER_LIST := $(wordlist 1,$(ITERS),1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19)
FIRST_VARIANT := $(firstword $(VARIANTS))
# rollout_rule(variant, k): the macro that makes iteration k's rollouts of a variant.
rollout_rule = $(if $(and $(filter 1,$(2)),$(filter-out $(FIRST_VARIANT),$(1))),first_rollouts,rollouts)
$(foreach v,$(VARIANTS),$(foreach k,$(ITER_LIST),\
  $(eval $(call $(call rollout_rule,$(v),$(k)),$(v),$(k)))$(eval $(call iteration,$(v),$(k)))))

# The final policy of each variant.
FINAL = $(call policy_dir,$(1),$(ITERS))

EVAL_POLICIES = --policy sft=$(SFT) $(foreach v,$(VARIANTS),--policy $(v)=$(call FINAL,$(v))) --policy full=$(SFT)@full
EVAL_RUN  = --index $(INDEX) $(PROTO) $(EVAL_FLAGS) $(STAGE_FLAGS) --out $(EVAL)
EVAL_ARGS = --task $(TASK) $(EVAL_RUN)

# eval_part(name, policy[@context], checkpoint, K): one policy's cached rollouts and scores on
# the test set of K, a process of its own so that `make -j` evaluates policies and test sets
# in parallel (and the SFT start while RL still runs). The report's call below names the
# same runs, so they are cache hits there.
define eval_part
$(EVAL)/.$(1)-k$(4).done: $(3)/checkpoint.json $(INDEX)/mempo_index.json
	$(BIN)/mempo eval $(EVAL_RUN) --test $(4)=$(TASK)/prompts-test-k$(4) --policy $(1)=$(2) --no-report && touch $$@
endef
$(foreach k,$(TEST_KS),\
  $(foreach v,$(VARIANTS),$(eval $(call eval_part,$(v),$(call FINAL,$(v)),$(call FINAL,$(v)),$(k))))\
  $(eval $(call eval_part,sft,$(SFT),$(SFT),$(k)))\
  $(eval $(call eval_part,full,$(SFT)@full,$(SFT),$(k))))
# eval_parts(names): the parts of those policies on every test set.
eval_parts = $(foreach p,$(1),$(foreach k,$(TEST_KS),$(EVAL)/.$(p)-k$(k).done))

# The table and plots: every part is a cache hit by now.
$(EVAL)/results.md: $(call eval_parts,$(VARIANTS) sft full)
	$(BIN)/mempo eval $(EVAL_ARGS) $(EVAL_POLICIES) && touch $@

# The training curves: mean reward and KL to the reference per iteration.
$(EVAL)/reward_vs_iter.png: $(foreach v,$(VARIANTS),$(call FINAL,$(v))/checkpoint.json)
	$(BIN)/mempo curves $(foreach v,$(VARIANTS),--run $(v)=$(RUN_DIR)/$(v)) --out $(EVAL) && touch $@

.PHONY: run train eval eval-parts
train: $(foreach v,$(VARIANTS),$(call FINAL,$(v))/checkpoint.json)
eval: $(EVAL)/results.md $(EVAL)/reward_vs_iter.png
run: eval
# The cached evaluations of the SFT start and each variant's final policy, without a
# report: what an experiment aggregates over seeds (pipelines/experiment.mk).
eval-parts: $(call eval_parts,$(VARIANTS) sft)

# Re-score a finished iteration with other advantage flags, reusing its cached rollouts,
# scores and log-probs: only the advantage and update stages run, into sibling
# directories named after RESCORE. For example
#   make -f pipelines/demo.mk rescore VARIANT=mempo ITER=1 RESCORE=nobase RESCORE_FLAGS="--mem-baseline none"
VARIANT ?= mempo
ITER    ?= 1
RESCORE ?= rescore
RESCORE_FLAGS ?= --mem-baseline none
RESCORE_DIR = $(RUN_DIR)/$(VARIANT)/iter-$(ITER)
.PHONY: rescore
rescore: $(RESCORE_DIR)/scores/_manifest.json $(RESCORE_DIR)/logprobs/_manifest.json
	$(BIN)/mempo-advantage --rollouts $(RESCORE_DIR)/rollouts --scores $(RESCORE_DIR)/scores \
	  --logprobs $(RESCORE_DIR)/logprobs $(RESCORE_FLAGS) $(STAGE_FLAGS) --out $(RESCORE_DIR)/advantages-$(RESCORE)
	$(BIN)/mempo-update --policy $(call policy_dir,$(VARIANT),$(call prev,$(ITER))) --ref $(SFT) \
	  --rollouts $(RESCORE_DIR)/rollouts --logprobs $(RESCORE_DIR)/logprobs --advantages $(RESCORE_DIR)/advantages-$(RESCORE) \
	  --seed $$(( $(SEED) * 1000 + $(ITER) )) $(UPDATE_FLAGS) $(DEV) $(STAGE_FLAGS) --out $(RESCORE_DIR)/policy-$(RESCORE)

# Every dataset's digest and every checkpoint's weights hash, one per line: two runs of
# one revision print the same lines (checkpoint.json also records the code version, so
# the weights are compared instead).
.PHONY: digests
digests:
	@for m in $$(find $(RUN_DIR) -name _manifest.json -not -path '*/_parts/*' | sort); do \
	  d=$$(dirname $$m); echo "$$d $$($(BIN)/mempo inspect --head 0 $$d | awk '$$1 == "digest" {print $$2}')"; \
	done
	@find $(RUN_DIR) -name '*.safetensors' | sort | xargs sha256sum | awk '{print $$2, $$1}'
