package update

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/mempo/mempo/format"
	"github.com/mempo/mempo/jobs"
	"github.com/mempo/mempo/model/qwen2"
)

// checkReference fails unless the reference checkpoint is of the policy's architecture
// and vocabulary: the KL compares their log-probs token by token, which means nothing
// across tokenizers. The reference's log-probs come from the logprobs dataset; its
// weights are not loaded here.
func checkReference(policy, ref string) error {
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
	pt, perr := tokenizerDigest(policy)
	rt, rerr := tokenizerDigest(ref)
	if perr == nil && rerr == nil && pt != rt {
		return fmt.Errorf("update: reference %s: %s differs from the policy's (%.12s vs %.12s): reference of another tokenizer: %w",
			ref, jobs.TokenizerFile, rt, pt, ErrInput)
	}
	return nil
}

func tokenizerDigest(dir string) (string, error) {
	path := filepath.Join(dir, jobs.TokenizerFile)
	if _, err := os.Stat(path); err != nil {
		return "", err
	}
	sum, _, err := format.Checksum(path)
	return sum, err
}
