// Package model holds no code: the folders below are the policy as a checkpoint holds
// it and libtorch runs it.
//
//	torch        the libtorch layer: runtime, raw handles, host copies, error routing
//	qwen2        the Qwen2 architecture: load/save, generate, log-probs, branch trees
//	sample       token sampling (pure Go)
//	bpe          the byte-level BPE tokenizer of tokenizer.json
//	safetensors  the safetensors file format
//
// Only model/ and train/ import gotch (DESIGN.md §1).
package model
