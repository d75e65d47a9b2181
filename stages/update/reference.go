package update

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/mempo/mempo/format"
	"github.com/mempo/mempo/model/qwen2"
)

// checkReference fails unless the reference checkpoint is of the policy's architecture,
// vocabulary and tokenizer: the KL compares their log-probs token by token, which means
// nothing across tokenizers. The reference's log-probs come from the logprobs dataset;
// its weights are not loaded here (scoredAgainst ties those log-probs to it), but the
// files read here are verified against each checkpoint's commit record.
func checkReference(policy, ref string) error {
	for _, c := range []struct{ name, dir string }{{"policy", policy}, {"reference", ref}} {
		if err := format.VerifyCheckpoint(c.dir, qwen2.ConfigFile, format.TokenizerFile); err != nil {
			return fmt.Errorf("update: %s: %w", c.name, err)
		}
	}
	pc, err := qwen2.ReadConfig(filepath.Join(policy, qwen2.ConfigFile))
	if err != nil {
		return fmt.Errorf("update: policy: %w", err)
	}
	rc, err := qwen2.ReadConfig(filepath.Join(ref, qwen2.ConfigFile))
	if err != nil {
		return fmt.Errorf("update: reference: %w", err)
	}
	if !slices.Equal(pc.Architectures, rc.Architectures) || pc.ModelType != rc.ModelType {
		return fmt.Errorf("update: reference %s: architectures %q (%s), policy %s has %q (%s): the reference must be the policy's model family: %w",
			ref, rc.Architectures, rc.ModelType, policy, pc.Architectures, pc.ModelType, ErrInput)
	}
	if pc.VocabSize != rc.VocabSize {
		return fmt.Errorf("update: reference %s: vocab_size %d, policy %s has %d: reference of another vocabulary: %w",
			ref, rc.VocabSize, policy, pc.VocabSize, ErrInput)
	}
	pt, err := tokenizerDigest(policy)
	if err != nil {
		return fmt.Errorf("update: policy: %w", err)
	}
	rt, err := tokenizerDigest(ref)
	if err != nil {
		return fmt.Errorf("update: reference: %w", err)
	}
	if pt != rt {
		return fmt.Errorf("update: reference %s: %s %s, policy %s has %s: the reference must share the policy's tokenizer: %w",
			ref, format.TokenizerFile, orNone(rt), policy, orNone(pt), ErrInput)
	}
	return nil
}

// tokenizerDigest is the sha256 of dir's tokenizer.json, "" when it has none.
func tokenizerDigest(dir string) (string, error) {
	sum, _, err := format.Checksum(filepath.Join(dir, format.TokenizerFile))
	if os.IsNotExist(err) {
		return "", nil
	}
	return sum, err
}

func orNone(sum string) string {
	if sum == "" {
		return "missing"
	}
	return "sha256 " + sum[:12] + "…"
}

// scoredAgainst checks that the logprobs dataset was computed from exactly these
// inputs, as mempo-logprob records them in its manifest: the rollouts dataset, the
// policy that generated them (mempo-logprob checked every row's policy_digest against
// it) and the reference its ref_logprobs are of. inputs are the update's own, named
// as keyedInputs names them. Training on log-probs of another reference would pull
// the policy toward a model the checkpoint does not record; on rollouts of another
// policy, every ratio would be off from the first step.
func scoredAgainst(logprobs string, inputs []format.Input) error {
	m, err := format.ReadManifest(logprobs)
	if err != nil {
		return fmt.Errorf("update: logprobs: %w", err)
	}
	recorded := map[string]format.Input{}
	for _, in := range m.Inputs {
		recorded[in.Name] = in
	}
	for _, in := range inputs {
		var flag, what string
		var class error
		switch in.Name {
		case "policy":
			flag, what, class = "--policy", "rerun the rollouts and log-probs with this policy or pass the checkpoint that generated them", ErrPolicy
		case "ref":
			flag, what, class = "--ref", "rerun mempo-logprob with this reference or pass the reference it scored against", ErrReference
		case "rollouts":
			flag, what, class = "--rollouts", "pass the rollouts it scored or rerun mempo-logprob on these", ErrInput
		default:
			continue
		}
		rec, ok := recorded[in.Name]
		if !ok {
			return fmt.Errorf("update: logprobs %s: manifest records no %s input (stage %q): log-probs not written by mempo-logprob; rerun it: %w: %w",
				logprobs, in.Name, m.Stage, class, ErrInput)
		}
		if rec.Digest != in.Digest {
			return fmt.Errorf("update: logprobs %s were scored with %s %s (%.24s…), %s %s is %.24s…: %s: %w: %w",
				logprobs, in.Name, rec.Path, rec.Digest, flag, in.Path, in.Digest, what, class, ErrInput)
		}
	}
	return nil
}
