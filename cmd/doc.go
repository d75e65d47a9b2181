// Package cmd holds no code: each folder is one binary (mempo-rollout, mempo-score,
// mempo-logprob, mempo-advantage, mempo-update, and mempo, the tools), and binds flags
// only: flags bound once to a step's Config, then the step's Run. A step binary's command
// line lives in internal/stagecmd, so that mempo invoked under a step's name (a symlink
// such as mempo-rollout -> mempo) is that step. docs/architecture.md lists the binaries
// and subcommands.
package cmd
