// Package cmd holds no code: each folder below is one binary. They are thin: flags bound
// once to a stage's Config, then the stage's Run.
//
//	mempo-rollout, mempo-score, mempo-logprob, mempo-advantage, mempo-update
//	                 the five stages of one MemPO iteration
//	mempo            tools: gen-task, index, import, init-model, sft, eval, curves,
//	                 inspect, verify, serve-retriever, version
//	internal/app     the CLI glue: env and --config resolution, exit codes, flag groups
package cmd
