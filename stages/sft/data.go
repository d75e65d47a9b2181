package sft

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"

	"github.com/mempo/mempo/agent/protocol"
	"github.com/mempo/mempo/agent/task"
	"github.com/mempo/mempo/format"
	"github.com/mempo/mempo/model/qwen2"
)

// Inputs are what SFT reads.
type Inputs struct {
	Task string // task directory: its task.json regenerates the world the oracle knows
	// Rollouts is a rollouts dataset to train on instead of the oracle of Task: each
	// turn's response after its context, as a rollout recorded them.
	Rollouts string
	Prompts  string // prompts dataset to clone; "" is the task's prompts-train
	Index    string // search index the rollouts use (`mempo index` over the task's corpus)
	Policy   string // checkpoint to train, with its tokenizer.json
}

func (in Inputs) prompts() string {
	if in.Prompts != "" {
		return in.Prompts
	}
	return filepath.Join(in.Task, task.TrainDir)
}

// example is one turn of an oracle trajectory as a training pair.
type example struct {
	UID  string
	Turn int
	qwen2.Pair
}

func (e *example) len() int { return len(e.Context) + len(e.Response) }

// questions regenerates the task's world from task.json and returns the questions of
// the prompts dataset, in its order, at most limit (0: all). A prompt that is not a
// question of that world is an error naming its row.
func questions(in Inputs, limit int) (*task.World, []task.Prompt, error) {
	path := filepath.Join(in.Task, task.SummaryFile)
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("--task: %w (a `mempo gen-task` output directory)", err)
	}
	var s task.Summary
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, nil, fmt.Errorf("read %s: %w: %w", path, err, ErrInput)
	}
	w, err := task.Generate(s.Config)
	if err != nil {
		return nil, nil, fmt.Errorf("regenerate the world of %s: %w", path, err)
	}
	byUID := map[string]task.Prompt{}
	for _, q := range append(slices.Clone(w.Train), w.Test...) {
		byUID[q.UID] = q
	}
	d, err := format.OpenDataset(in.prompts())
	if err != nil {
		return nil, nil, fmt.Errorf("prompts: %w", err)
	}
	var out []task.Prompt
	for i := range d.Len() {
		r, err := format.OpenShard[format.Prompt](d, i)
		if err != nil {
			return nil, nil, fmt.Errorf("prompts: %w", err)
		}
		rows, err := format.ReadAll(r)
		if err != nil {
			return nil, nil, fmt.Errorf("prompts: %w", err)
		}
		for j, row := range rows {
			q, ok := byUID[row.UID]
			if !ok {
				return nil, nil, fmt.Errorf("prompts %s row %d: uid %s is not a question of the world in %s; pass the --task the prompts came from: %w",
					d.Path(i), j, row.UID, path, ErrInput)
			}
			out = append(out, q)
			if limit > 0 && len(out) == limit {
				return w, out, nil
			}
		}
	}
	if len(out) == 0 {
		return nil, nil, fmt.Errorf("prompts %s: no questions: %w", in.prompts(), ErrInput)
	}
	return w, out, nil
}

// replay runs an oracle trajectory through an episode with the policy's tokenizer and
// chat template c (nil: the protocol's glue): each
// step's context is what the context policy builds, its response the oracle's text
// encoded, and each search is answered with the documents the oracle retrieved, so the
// pairs are exactly what a rollout of these responses would record.
func replay(p *protocol.Protocol, c protocol.Chat, tok protocol.Tokenizer, cfg protocol.Config, q task.Prompt, tr task.Trajectory) ([]example, error) {
	e, err := protocol.NewEpisode(p, c, tok, cfg, q.Question, q.K)
	if err != nil {
		return nil, fmt.Errorf("question %s: %w", q.UID, err)
	}
	var out []example
	for t, s := range tr.Steps {
		c, err := e.Context()
		if err != nil {
			return nil, fmt.Errorf("question %s turn %d: %w", q.UID, t, err)
		}
		ids := tok.Encode(s.Response)
		if err := e.Step(protocol.Generation{IDs: ids}); err != nil {
			return nil, fmt.Errorf("question %s turn %d: %w", q.UID, t, err)
		}
		if query, ok := e.Query(); ok {
			if query != s.Query {
				return nil, fmt.Errorf("question %s turn %d: the replayed turn searches %q, the oracle %q: the tokenizer does not round-trip the oracle's text: %w",
					q.UID, t, query, s.Query, ErrInput)
			}
			if err := e.Observe(s.Docs); err != nil {
				return nil, fmt.Errorf("question %s turn %d: %w", q.UID, t, err)
			}
		}
		out = append(out, example{UID: q.UID, Turn: t, Pair: qwen2.Pair{Context: qwen2.Tokens(c.IDs()), Response: qwen2.Tokens(ids)}})
	}
	return out, nil
}

// split holds out round(frac·n) of n trajectories, at least one when frac > 0 and at
// most n−1, chosen by rng; both lists are in trajectory order.
func split(n int, frac float64, rng *rand.Rand) (train, held []int) {
	h := int(math.Round(frac * float64(n)))
	if frac > 0 {
		h = max(h, 1)
	}
	h = min(h, n-1)
	out := map[int]bool{}
	for _, i := range rng.Perm(n)[:max(h, 0)] {
		out[i] = true
	}
	for i := range n {
		if out[i] {
			held = append(held, i)
		} else {
			train = append(train, i)
		}
	}
	return train, held
}

// batch is one optimizer step of the plan.
type batch struct {
	Epoch    int
	Examples []int
}

// pairs is the batch's examples as the pairs a training pass takes.
func (b batch) pairs(examples []example) []qwen2.Pair {
	out := make([]qwen2.Pair, len(b.Examples))
	for i, j := range b.Examples {
		out[i] = examples[j].Pair
	}
	return out
}

// plan lays out every step before any work, so a resumed run takes the same steps: each
// epoch shuffles the training examples with rng and cuts the shuffled order into
// batches whose rows × longest row stay within budget.
func plan(examples []example, train []int, epochs, budget int, rng *rand.Rand) []batch {
	var out []batch
	for e := range epochs {
		order := slices.Clone(train)
		rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		for _, b := range qwen2.SplitBudget(order, func(i int) int { return examples[i].len() }, budget) {
			out = append(out, batch{Epoch: e, Examples: b})
		}
	}
	return out
}
