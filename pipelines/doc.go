// Package pipelines holds no code: its Make fragments wire the stage binaries into DAGs
// whose targets are the stages' commit records, and its tests run them end to end.
// docs/architecture.md places them in the layout.
//
//	rl.mk          RL iterations of each variant from a start policy, and their evaluation
//	mempo.mk       one run on the embedded synthetic task: task, index, init-model, SFT, rl.mk
//	run.mk         your own run: import, index (or a retrieval server), optional SFT on
//	               rollouts, rl.mk from a pretrained checkpoint, evaluation on your test split
//	embedded.mk    the embedded default's settings: task, index, init-model, SFT
//	demo.mk        the demo: MemPO, GRPO and the baselines, evaluated (make demo)
//	experiment.mk  variants × seeds on one task, reported with intervals (make experiment)
//	serve.mk       the rollout stage through one mempo serve-policy on loopback, in shards
//	scaleout/      cluster set-ups: Slurm (iteration-submit.sh chains one iteration's
//	               jobs: rollout array, merge, score, log-probs, advantages, 2-node
//	               update), Kubernetes (retriever, rollout workers as Argo Workflows or
//	               Indexed Jobs, a policy server, the update as a PyTorchJob; one
//	               kustomization), torchrun; the loopback script serve.mk runs
package pipelines
