# The experiment harness: does the memory advantage help? Variants × seeds, each seed a
# full run of pipelines/mempo.mk (its own initial model, SFT start — shared by the
# variants of that seed — RL iterations and evaluations), all seeds on one task and test
# questions, then one report across seeds: every metric with its 95% interval (a
# bootstrap over seeds and questions) and the paired difference of each variant against
# BASELINE (mempo eval --from), and the training curves with their spread over seeds
# (mempo curves). Everything is cached like the demo, so adding a seed or a variant runs
# only what is new. For example
#   make -f pipelines/experiment.mk -j2 run
#   make -f pipelines/experiment.mk -j2 run SEEDS="1 2 3 4" VARIANTS="mempo grpo nobase"
#
# Layout of $(EXP_DIR):
#   task/ index/                      the shared task and its search index
#   seed-<s>/                         one mempo.mk run per seed (init, sft, <variant>/iter-<k>, eval)
#   report/                           results.md, results.csv, plots with intervals, curves

# SETTING=mixk: where memory decides. RL trains on questions of 2 to 4 objectives (the
# medium experiment trains on 2 only, where K = 4 and 6 stay near zero F1 for every
# policy) with the embedded default's reward, em-mean, so a group with partial success
# still carries an outcome signal; the policies are evaluated at K = 2, 4 and 6; MemPO
# with and without --mem-content-only against GRPO over five seeds. The task, the SFT
# start and the iterations are the demo's otherwise. docs/results.md has its table and cost.
#   make -f pipelines/experiment.mk -j2 run SETTING=mixk
ifeq ($(SETTING),mixk)
EXP_DIR    ?= runs/exp-mixk
SEEDS      ?= 1 2 3 4 5
VARIANTS   ?= mempo grpo memcontent
TASK_FLAGS ?= --train 3000 --train-k 2 --train-k-max 4 --test 48 --no-year-questions --two-hop-rate 0.25
TEST_K     ?= 2,4,6
ITERS      ?= 4
SCORE_FLAGS ?= --reward em-mean
EVAL_FLAGS ?= --limit 48 --max-turns 8 --max-new-tokens 64 --threads 1 --dtype $(EVAL_DTYPE)
endif

EXP_DIR  ?= runs/exp
SEEDS    ?= 1 2 3
VARIANTS ?= mempo grpo
BASELINE ?= grpo
BOOTSTRAP ?= 2000

# Variants are advantage, score and log-prob flags (ADV_FLAGS_<v>, SCORE_FLAGS_<v>,
# LOGPROB_FLAGS_<v>); define your own the same way.
ADV_FLAGS_mempo     ?= --mem-coef 1
ADV_FLAGS_grpo      ?= --mem-coef 0
LOGPROB_FLAGS_grpo  ?= --memory-pass=false
ADV_FLAGS_nobase    ?= --mem-coef 1 --mem-baseline none
ADV_FLAGS_turnpool  ?= --mem-coef 1 --mem-pool turn
# The memory advantage on the memory's content tokens only, not its <mem> and </mem>
# tags: the tags are where a turn opens and closes its memory, a format decision the
# memory signal otherwise trains too (docs/memory-drift.md). VARIANTS="mempo grpo memcontent".
ADV_FLAGS_memcontent ?= --mem-coef 1 --mem-content-only
# The memory reward against the context each memory was written from, P_ctx, instead of
# the full history's P_full: on the demo the memory signal costs 0.35-0.44 old passes instead of
# 1.3-1.5 (README, the context baseline).
ADV_FLAGS_ctxbase     ?= --mem-coef 1 --mem-baseline context
LOGPROB_FLAGS_ctxbase ?= --p-full=false --p-ctx
ADV_FLAGS_emall     ?= --mem-coef 1
SCORE_FLAGS_emall   ?= --reward em-all
ADV_FLAGS_subem     ?= --mem-coef 1
SCORE_FLAGS_subem   ?= --reward subem-mean

# The medium experiment the README reports (about 80 minutes on 2 cores with -j2): the
# embedded default with MemPO's own reward, em-all, under which a group whose samples all
# fail carries no outcome signal while its memories still do — where the memory advantage
# has room to act; five iterations; 128 test questions per K, so the paired F1
# difference is resolved to a few hundredths.
SCORE_FLAGS ?= --reward em-all
ITERS       ?= 5
TASK_FLAGS  ?= --train 3000 --test 128 --no-year-questions --two-hop-rate 0.25
TEST_K      ?= 2,4
EVAL_FLAGS  ?= --limit 128 --max-turns 8 --max-new-tokens 64 --threads 1 --dtype $(EVAL_DTYPE)

include pipelines/embedded.mk

BIN       ?= bin
TASK      := $(EXP_DIR)/task
INDEX     := $(EXP_DIR)/index
TASK_SEED ?= 1
REPORT    := $(EXP_DIR)/report
CODE      := $(BIN)/CODE_VERSION
STAGE_FLAGS ?= --progress plain --log-level warn
PROTO := $(if $(PROTOCOL),--protocol $(PROTOCOL))

# Every setting reaches the per-seed runs through the environment (mempo.mk's ?=).
export

$(TASK)/task.json: $(CODE)
	$(BIN)/mempo gen-task --seed $(TASK_SEED) --test-k $(TEST_K) $(TASK_FLAGS) $(STAGE_FLAGS) --out $(TASK) && touch $@

$(INDEX)/mempo_index.json: $(TASK)/task.json
	$(BIN)/mempo index --corpus $(TASK)/corpus.jsonl --out $(INDEX) && touch $@

# seed-<s>: one run of mempo.mk up to the cached evaluations (no per-seed report).
.PHONY: run report $(foreach s,$(SEEDS),seed-$(s))
$(foreach s,$(SEEDS),seed-$(s)): seed-%: $(INDEX)/mempo_index.json
	+$(MAKE) --no-print-directory -f pipelines/mempo.mk RUN_DIR=$(EXP_DIR)/seed-$* SEED=$* TASK=$(TASK) INDEX=$(INDEX) \
	  TASK_SEED=$(TASK_SEED) VARIANTS="$(VARIANTS)" BIN=$(BIN) $(if $(TB_DIR),TB_DIR=$(TB_DIR)/seed-$*) eval-parts

# Seeds run one after another, each with all of make's jobs: a seed's SFT takes both cores
# (--threads 2 in SFT_FLAGS), and two SFTs side by side ran 2.6x slower than one after
# the other here (0.25 steps/s each against 1.15-1.42 alone: their OpenMP teams oversubscribe
# the cores). Each seed after the first waits for the one before it in SEEDS.
# SEED_PAIRS pairs each seed with the one before it (first:3 3:1 1:2 for SEEDS="3 1 2"); it is
# the harness's own, so the seed runs do not get it in their environment.
SEED_PAIRS := $(join $(wordlist 1,$(words $(SEEDS)),first $(SEEDS)),$(addprefix :,$(SEEDS)))
unexport SEED_PAIRS
$(foreach p,$(filter-out first:%,$(SEED_PAIRS)),$(eval seed-$(lastword $(subst :, ,$(p))): | seed-$(firstword $(subst :, ,$(p)))))

# The report reads the seeds' cached datasets only (a few seconds), so it always runs:
# the table with intervals, the curves over seeds (reward, KL, groups without reward
# spread, invalid turns) and the turn-format audit of every evaluation (turns.txt, one
# line per seed, variant and K: invalid turns by kind, trajectories that never recover).
comma := ,
report: $(foreach s,$(SEEDS),seed-$(s))
	$(BIN)/mempo eval $(foreach s,$(SEEDS),--from seed$(s)=$(EXP_DIR)/seed-$(s)/eval) --task $(TASK) \
	  --baseline $(BASELINE) --bootstrap $(BOOTSTRAP) --out $(REPORT)
	$(BIN)/mempo curves $(foreach v,$(VARIANTS),$(foreach s,$(SEEDS),--run $(v)=$(EXP_DIR)/seed-$(s)/$(v))) --out $(REPORT)
	$(BIN)/mempo inspect --turns $(foreach s,$(SEEDS),$(foreach v,$(VARIANTS),$(foreach k,$(subst $(comma), ,$(TEST_K)),\
	  $(EXP_DIR)/seed-$(s)/eval/$(v)/k$(k)/rollouts))) > $(REPORT)/turns.txt

run: report
	@echo; cat $(REPORT)/results.md; echo; echo "plots: $(REPORT)/*.png"
