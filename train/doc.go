// Package train turns a checkpoint into the next one on libtorch: the PPO objective on
// tensors (clipped and dual-clipped policy loss, KL to the reference, entropy bonus,
// aggregated over a mini-batch split into micro-batches with exact gradient
// accumulation), the supervised NLL step of the SFT warm start, an AdamW whose state is
// saved and restored exactly (trainer/optimizer.safetensors), and Loop, the training skeleton
// the update and SFT stages share: key, cache hit or lock, resume from a snapshot, the
// steps of a plan, trainer_state.json, commit through jobs.
//
// A step's passes run where the runtime puts them, followed by one AdamW step, through
// train/dataparallel's Trainer: in this process, across a local group of processes, or
// as one rank of several machines (train/collective). The objective's settings and their
// float64 reference formulas are in train/ppo.
package train
