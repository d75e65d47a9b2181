# RL iterations and their evaluation as a Make DAG, on any start policy and prompts: the
# part of a run that pipelines/mempo.mk (the embedded task) and pipelines/run.mk (your own
# data and checkpoint) share. Every target is a stage's commit record; the includer sets:
#   TRAIN, TRAIN_MARK        the training prompts dataset and a file that exists once it does
#   START, START_MARK        the checkpoint iteration 1 starts from, also the KL reference,
#                            and a file that exists once it does; START_NAME labels it in eval
#   RETRIEVE, RETRIEVE_MARK  the rollouts' retrieval flags (--index DIR or --retriever-url URL)
#                            and a file that exists once the index does (empty for a server)
#   TEST_KS, TEST_SET        the test sets' objective counts, and $(call TEST_SET,K) the
#                            prompts dataset of K; EVAL_TESTS the report's test flags
#   BASELINES                evaluated besides START and the variants' final policies:
#                            full (START with the full-context policy)
# and BIN, RUN_DIR, ITERS, VARIANTS, SEED, CODE, the *_FLAGS, PROTO and DEV.
REF        ?= $(START)
# TB_DIR, when set, is a TensorBoard log directory: each stage of iteration k of a
# variant also logs its metrics (--tb-dir, not part of any cache key) into
# TB_DIR/<variant> at step k (--tb-step), so `tensorboard --logdir TB_DIR` shows one run
# per variant with the iterations along the x axis. Iteration 1's rollouts of a variant
# after the first are a copy, not a stage run, and log nothing there. mempo eval is not
# logged: it runs a rollout and a score per policy and test set, which would share tags.
TB_DIR     ?=
# tb(run, step): the flags that log a stage's metrics into TB_DIR/run at step.
tb = $(if $(TB_DIR),--tb-dir $(TB_DIR)/$(1) --tb-step $(2))
# LAUNCH, when set, starts every update as the ranks of one data-parallel run: a
# launcher's command line that the update's own command line follows, e.g.
#   LAUNCH="torchrun --nproc-per-node 2 --no-python"
# (torchrun sets WORLD_SIZE, RANK, MASTER_ADDR and MASTER_PORT, which mempo-update joins;
# its --world-size then keys the checkpoint). Empty: one process. SFT_LAUNCH does the
# same for the SFT of mempo.mk and run.mk (whose SFT_FLAGS must then not hold --procs).
LAUNCH     ?=
SFT_LAUNCH ?=
START_NAME ?= sft
BASELINES  ?= full
EVAL       ?= $(RUN_DIR)/eval

# policy_dir(variant, k): the policy iteration k+1 starts from (k = 0: START), and
# policy_mark(variant, k) the file that exists once it does.
policy_dir  = $(if $(filter 0,$(2)),$(START),$(RUN_DIR)/$(1)/iter-$(2)/policy)
policy_mark = $(if $(filter 0,$(2)),$(START_MARK),$(RUN_DIR)/$(1)/iter-$(2)/policy/checkpoint.json)
prev       = $(word $(1),0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19)

# rollouts(variant, k): the rollouts of RL iteration k of a variant.
define rollouts
$(RUN_DIR)/$(1)/iter-$(2)/rollouts/_manifest.json: $(call policy_mark,$(1),$(call prev,$(2))) $(TRAIN_MARK) $(RETRIEVE_MARK)
	$(BIN)/mempo-rollout --prompts $(TRAIN) --policy $(call policy_dir,$(1),$(call prev,$(2))) $(RETRIEVE) \
	  --prompt-offset $$$$(( $(RL_PROMPT_OFFSET) + ($(2) - 1) * $(PROMPTS_PER_ITER) )) --prompt-limit $(PROMPTS_PER_ITER) \
	  --seed $$$$(( $(SEED) * 1000 + $(2) )) $(PROTO) $(ROLLOUT_FLAGS) $(DEV) $(STAGE_FLAGS) $(call tb,$(1),$(2)) --out $$(@D) && touch $$@
endef

# first_rollouts(variant): iteration 1 rolls START out for every variant with the
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
	$(BIN)/mempo-score --rollouts $$(<D) --prompts $(TRAIN) $(PROTO) $(SCORE_FLAGS) $(SCORE_FLAGS_$(1)) $(STAGE_FLAGS) $(call tb,$(1),$(2)) --out $$(@D) && touch $$@
$$($(1)_ITER_$(2))/logprobs/_manifest.json: $$($(1)_ITER_$(2))/rollouts/_manifest.json $(START_MARK)
	$(BIN)/mempo-logprob --rollouts $$(<D) --prompts $(TRAIN) --policy $(call policy_dir,$(1),$(call prev,$(2))) --ref $(REF) \
	  $(PROTO) $(LOGPROB_FLAGS) $(LOGPROB_FLAGS_$(1)) $(DEV) $(STAGE_FLAGS) $(call tb,$(1),$(2)) --out $$(@D) && touch $$@
$$($(1)_ITER_$(2))/advantages/_manifest.json: $$($(1)_ITER_$(2))/scores/_manifest.json $$($(1)_ITER_$(2))/logprobs/_manifest.json
	$(BIN)/mempo-advantage --rollouts $$($(1)_ITER_$(2))/rollouts --scores $$($(1)_ITER_$(2))/scores \
	  --logprobs $$($(1)_ITER_$(2))/logprobs $(ADV_FLAGS_$(1)) $(STAGE_FLAGS) $(call tb,$(1),$(2)) --out $$(@D) && touch $$@
$$($(1)_ITER_$(2))/policy/checkpoint.json: $$($(1)_ITER_$(2))/advantages/_manifest.json
	$(LAUNCH) $(BIN)/mempo-update --policy $(call policy_dir,$(1),$(call prev,$(2))) --ref $(REF) \
	  --rollouts $$($(1)_ITER_$(2))/rollouts --logprobs $$($(1)_ITER_$(2))/logprobs --advantages $$($(1)_ITER_$(2))/advantages \
	  --seed $$$$(( $(SEED) * 1000 + $(2) )) $(UPDATE_FLAGS) $(DEV) $(STAGE_FLAGS) $(call tb,$(1),$(2)) --out $$(@D) && touch $$@
endef

ITER_LIST := $(wordlist 1,$(ITERS),1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19)
FIRST_VARIANT := $(firstword $(VARIANTS))
# rollout_rule(variant, k): the macro that makes iteration k's rollouts of a variant.
rollout_rule = $(if $(and $(filter 1,$(2)),$(filter-out $(FIRST_VARIANT),$(1))),first_rollouts,rollouts)
$(foreach v,$(VARIANTS),$(foreach k,$(ITER_LIST),\
  $(eval $(call $(call rollout_rule,$(v),$(k)),$(v),$(k)))$(eval $(call iteration,$(v),$(k)))))

# The final policy of each variant, and the file that exists once it does.
FINAL      = $(call policy_dir,$(1),$(ITERS))
FINAL_MARK = $(call policy_mark,$(1),$(ITERS))

EVAL_POLICIES = --policy $(START_NAME)=$(START) $(foreach v,$(VARIANTS),--policy $(v)=$(call FINAL,$(v))) $(if $(filter full,$(BASELINES)),--policy full=$(START)@full)
EVAL_RUN  = $(RETRIEVE) $(PROTO) $(EVAL_FLAGS) $(STAGE_FLAGS) --out $(EVAL)
EVAL_ARGS = $(EVAL_TESTS) $(EVAL_RUN)

# eval_part(name, policy[@context], mark, K): one policy's cached rollouts and scores on
# the test set of K, a process of its own so that `make -j` evaluates policies and test sets
# in parallel (and the start while RL still runs). The report's call below names the
# same runs, so they are cache hits there.
define eval_part
$(EVAL)/.$(1)-k$(4).done: $(3) $(RETRIEVE_MARK) $(call TEST_MARK,$(4))
	$(BIN)/mempo eval $(EVAL_RUN) --test $(4)=$(call TEST_SET,$(4)) --policy $(1)=$(2) --no-report && touch $$@
endef
$(foreach k,$(TEST_KS),\
  $(foreach v,$(VARIANTS),$(eval $(call eval_part,$(v),$(call FINAL,$(v)),$(call FINAL_MARK,$(v)),$(k))))\
  $(eval $(call eval_part,$(START_NAME),$(START),$(START_MARK),$(k)))\
  $(if $(filter full,$(BASELINES)),$(eval $(call eval_part,full,$(START)@full,$(START_MARK),$(k)))))
# eval_parts(names): the parts of those policies on every test set.
eval_parts = $(foreach p,$(1),$(foreach k,$(TEST_KS),$(EVAL)/.$(p)-k$(k).done))

# The table and plots: every part is a cache hit by now.
$(EVAL)/results.md: $(call eval_parts,$(VARIANTS) $(START_NAME) $(filter full,$(BASELINES)))
	$(BIN)/mempo eval $(EVAL_ARGS) $(EVAL_POLICIES) && touch $@

# The training curves: mean reward and KL to the reference per iteration.
$(EVAL)/reward_vs_iter.png: $(foreach v,$(VARIANTS),$(call FINAL_MARK,$(v)))
	$(BIN)/mempo curves $(foreach v,$(VARIANTS),--run $(v)=$(RUN_DIR)/$(v)) --out $(EVAL) && touch $@

.PHONY: run train eval eval-parts
train: $(foreach v,$(VARIANTS),$(call FINAL_MARK,$(v)))
eval: $(EVAL)/results.md $(EVAL)/reward_vs_iter.png
run: eval
# The cached evaluations of the start and each variant's final policy, without a
# report: what an experiment aggregates over seeds (pipelines/experiment.mk).
eval-parts: $(call eval_parts,$(VARIANTS) $(START_NAME))

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
	  --logprobs $(RESCORE_DIR)/logprobs $(RESCORE_FLAGS) $(STAGE_FLAGS) $(call tb,$(VARIANT)-$(RESCORE),$(ITER)) --out $(RESCORE_DIR)/advantages-$(RESCORE)
	$(LAUNCH) $(BIN)/mempo-update --policy $(call policy_dir,$(VARIANT),$(call prev,$(ITER))) --ref $(REF) \
	  --rollouts $(RESCORE_DIR)/rollouts --logprobs $(RESCORE_DIR)/logprobs --advantages $(RESCORE_DIR)/advantages-$(RESCORE) \
	  --seed $$(( $(SEED) * 1000 + $(ITER) )) $(UPDATE_FLAGS) $(DEV) $(STAGE_FLAGS) $(call tb,$(VARIANT)-$(RESCORE),$(ITER)) --out $(RESCORE_DIR)/policy-$(RESCORE)

# Every dataset's digest and every checkpoint's weights hash, one per line: two runs of
# one revision print the same lines (checkpoint.json also records the code version, so
# the weights are compared instead).
.PHONY: digests
digests:
	@for m in $$(find $(RUN_DIR) -name _manifest.json -not -path '*/_parts/*' | sort); do \
	  d=$$(dirname $$m); echo "$$d $$($(BIN)/mempo inspect --head 0 $$d | awk '$$1 == "digest" {print $$2}')"; \
	done
	@find $(RUN_DIR) -name '*.safetensors' | sort | xargs sha256sum | awk '{print $$2, $$1}'
