package sft

import (
	"fmt"

	"github.com/mempo/mempo/format"
	"github.com/mempo/mempo/jobs"
	"github.com/mempo/mempo/model/qwen2"
)

// fromRollouts reads the rollouts dataset dir into examples, one per turn with a
// response, exactly as the turn was seen (prompt_ids) and written (response_ids), and
// lists each trajectory's (uid, sample) examples in the dataset's order. The rollouts
// must come from a policy with this policy's tokenizer: a turn longer than the model's
// context is an error naming it. What is in the rows is trained on as it is: a user
// filters out the trajectories that should not be cloned before (with a stronger
// policy's rollouts, their scores).
func fromRollouts(dir string, maxPositions int) (examples []example, perTraj [][]int, err error) {
	rows, err := format.ReadDataset[format.Rollout](dir)
	if err != nil {
		return nil, nil, fmt.Errorf("--rollouts: %w", err)
	}
	type traj struct {
		uid    string
		sample int32
	}
	var last traj
	for i, r := range rows {
		if t := (traj{r.UID, r.Sample}); i == 0 || t != last {
			perTraj = append(perTraj, nil)
			last = t
		}
		if len(r.ResponseIDs) == 0 {
			continue
		}
		e := example{UID: r.UID, Turn: int(r.Turn), Pair: qwen2.Pair{Context: qwen2.Tokens(r.PromptIDs), Response: qwen2.Tokens(r.ResponseIDs)}}
		if e.len() > maxPositions {
			return nil, nil, fmt.Errorf("--rollouts %s: uid %s sample %d turn %d: %d tokens exceed the policy's max_position_embeddings %d: %w",
				dir, r.UID, r.Sample, r.Turn, e.len(), maxPositions, ErrInput)
		}
		perTraj[len(perTraj)-1] = append(perTraj[len(perTraj)-1], len(examples))
		examples = append(examples, e)
	}
	if len(examples) == 0 {
		return nil, nil, fmt.Errorf("--rollouts %s: no turn with a response: %w", dir, ErrInput)
	}
	return examples, perTraj, nil
}

// rolloutInputs are the keyed inputs of SFT on rollouts: the rollouts and the policy.
func rolloutInputs(in Inputs) ([]format.Input, error) {
	rolls, err := jobs.DatasetInput("rollouts", in.Rollouts)
	if err != nil {
		return nil, err
	}
	policy, err := jobs.CheckpointInput("policy", in.Policy)
	if err != nil {
		return nil, err
	}
	return []format.Input{rolls, policy}, nil
}
