// Package model holds no code: its folders are the policy as a checkpoint holds it and
// libtorch runs it (torch, qwen2, engine, sample, bpe, chat, safetensors, serve). Only model/ and
// train/ import gotch. docs/architecture.md describes each package and the import rule.
package model
