package train

import (
	"fmt"
	"strings"

	"github.com/mempo/mempo/model/qwen2"
)

// Runtime is how and where a training stage runs its passes, the settings the update
// and SFT stages share. Both embed it in their Config without a name, so encoding/json
// flattens its fields into the config's object: the tags are the keys the configs have
// always had, and a stage's canonical JSON, its cache key, does not see the embedding.
type Runtime struct {
	// Chunk is the number of response positions whose logits exist at once (qwen2
	// ScoreConfig.Chunk); 0 means 256.
	Chunk int `json:"chunk"`
	// Device is cpu, cuda or cuda:N; DType float32, bfloat16 or float16 ("" keeps the
	// checkpoint's). A bfloat16 model trains with float32 master weights in AdamW.
	Device string `json:"device"`
	DType  string `json:"dtype,omitempty"`
	// Attention is how passes of several new tokens attend (qwen2.Options.Attention):
	// "" or auto, eager or sdpa. It is keyed: the kernels differ in the last bits.
	Attention string `json:"attention,omitempty"`
	// GradCheckpoint recomputes each decoder layer's activations in the backward pass
	// instead of keeping them (qwen2.Checkpointed): far less memory per pass for one
	// more forward pass. The gradients equal the plain pass's to float32 rounding.
	GradCheckpoint bool `json:"grad_checkpoint,omitempty"`
	// SharePrefixes runs each pass as a tree pass (qwen2.TreeLogProbTensor): the context
	// prefixes its sequences share are run once. The update's pass is a micro-batch, cut
	// from the mini-batch in context order so that samples sharing a prefix (a group's
	// prompt, the turns a later turn repeats) share a pass; SFT's is a step's batch,
	// whose turns share the system prompt and a trajectory's question, and with a
	// context loss weight a shared prefix is also scored once, its score counting once
	// per turn. The gradients equal the unshared pass's to float rounding. A checkpointed
	// pass (GradCheckpoint) does not share.
	SharePrefixes bool `json:"share_prefixes"`
	// Procs trains with this many processes on the CPU, data parallel
	// (train/dataparallel), its passes dealt among them by tokens: the update deals each
	// mini-batch's micro-batches, SFT each step's batch in Procs shares of about equal
	// tokens. Keyed, since the gradients equal one process's only to float rounding; 0
	// and 1 train in one process, and key as before.
	Procs int `json:"procs,omitempty"`
	// WorldSize is how many ranks train together, each a process of the stage's command
	// that a launcher started (torchrun, srun, a Kubernetes Job) in a process group
	// (Group): every rank runs its share of each step's passes (the update's
	// micro-batches, SFT's batch), dealt by tokens as Procs deals them, and the ranks sum
	// their gradients. Keyed as Procs is; 0 and 1 train alone.
	WorldSize int `json:"world_size,omitempty"`
	// Group is this process's membership of the WorldSize ranks (train/collective);
	// required when WorldSize > 1.
	Group Collective `json:"-"`
}

// DefaultRuntime trains on the CPU in one process, sharing prefixes.
var DefaultRuntime = Runtime{Device: "cpu", SharePrefixes: true}

// Options are the model options the runtime loads a policy with.
func (r Runtime) Options() qwen2.Options {
	return qwen2.Options{Device: r.Device, DType: r.DType, Attention: r.Attention}
}

// Check names the first bad runtime setting by its flag, WorldSize checked against
// Procs and Group by CheckRanks, wrapping the error in class (the stage's ErrConfig).
func (r Runtime) Check(class error) error {
	switch {
	case r.Chunk < 0:
		return fmt.Errorf("chunk %d: want >= 0: %w", r.Chunk, class)
	case r.Procs < 0:
		return fmt.Errorf("--procs %d: want >= 1 (0: 1): %w", r.Procs, class)
	case r.Procs > 1 && strings.HasPrefix(r.Device, "cuda"):
		return fmt.Errorf("--procs %d with --device %s: several processes train on the CPU only: %w", r.Procs, r.Device, class)
	}
	return CheckRanks(r.WorldSize, r.Procs, r.Group, class)
}
