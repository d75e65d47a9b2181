// Package stages holds no code: each folder below is one step of the pipeline, the thing
// a binary or a mempo subcommand runs. A step is a Config, its Inputs and a Run that reads
// datasets and checkpoints and commits its output through jobs.
//
//	rollout    mempo-rollout: the agent plays each prompt n times → rollouts
//	score      mempo-score: answers, EM/F1, rewards → scores
//	logprob    mempo-logprob: old/ref log-probs, the memory pass → logprobs
//	advantage  mempo-advantage: outcome and memory advantages → advantages
//	update     mempo-update: the PPO update → the next policy checkpoint
//	sft        mempo sft: supervised warm-up on oracle trajectories → a checkpoint
//	initmodel  mempo init-model: a fresh small Qwen2 and its tokenizer → a checkpoint
//	ingest     mempo import: verl / Search-R1 data → prompts
//	eval       mempo eval, mempo curves: rollout + score per policy → the report
//	gentask    mempo gen-task: the synthetic world → corpus and prompts
//
// No stage imports another: they talk only through what they commit (DESIGN.md §1).
package stages
