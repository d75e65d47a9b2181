// Package internal holds no code: the folders below are small primitives the whole
// module shares.
//
//	renameio  the one atomic writer: files and directories committed whole, mode 0644
//	stats     means and AUCs of the stage summaries
//	tensorboard  TensorBoard event files: the stages' metrics for TensorBoard and W&B
//	layout    the test of the import rule of DESIGN.md §1
package internal
