// Package stages holds no code: each folder is one step of the pipeline, the thing a
// binary or a mempo subcommand runs: a Config, its Inputs and a Run that reads datasets
// and checkpoints and commits its output through jobs. No step imports another; they talk
// only through what they commit. docs/architecture.md lists the steps with what each
// reads and writes.
package stages
