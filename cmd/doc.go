// Package cmd holds no code: each folder below is one binary. They are thin: flags bound
// once to a stage's Config, then the stage's Run. A stage binary's command line lives in
// internal/stagecmd, so that mempo can hold it too: invoked under a stage's name (through
// a symlink such as mempo-rollout -> mempo), the mempo executable is that stage, and one
// executable carries the whole pipeline.
//
//	mempo-rollout, mempo-score, mempo-logprob, mempo-advantage, mempo-update
//	                 the five stages of one MemPO iteration
//	mempo            tools: gen-task, index, import, init-model, sft, eval, curves,
//	                 inspect, verify, serve-retriever, version
//	internal/app     the CLI glue: env and --config resolution, exit codes, flag groups
//	internal/stagecmd
//	                 each stage's command line (its flags and App), one package per stage,
//	                 so that the pure-Go stages' binaries stay pure Go
package cmd
