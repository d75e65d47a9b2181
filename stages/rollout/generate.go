package rollout

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"strconv"

	"github.com/mempo/mempo/agent/protocol"
	"github.com/mempo/mempo/model/qwen2"
	"github.com/mempo/mempo/model/sample"
)

// request is one turn of one trajectory to generate.
type request struct {
	UID     string
	Sample  int
	Turn    int
	Context []int32
	// Seed is the request's random stream: a function of (stage seed, uid, sample,
	// turn) only, so a trajectory's tokens never depend on which other trajectories
	// share its batch, its shard or its process.
	Seed uint64
}

// sampler produces one response per request, in request order. The policy model is the
// real one; tests script one.
type sampler interface {
	sample(ctx context.Context, reqs []request) ([]protocol.Generation, error)
}

// requestSeed derives a request's stream from sha256 of labeled fields, so nearby seeds,
// samples and turns give unrelated streams.
func requestSeed(seed int64, uid string, sampleIdx, turn int) uint64 {
	h := sha256.New()
	fmt.Fprintf(h, "rollout\nseed %d\nuid %s\nsample %d\nturn %d\n", seed, strconv.Quote(uid), sampleIdx, turn)
	return binary.LittleEndian.Uint64(h.Sum(nil))
}

// slot names a trajectory of a shard.
type slot struct {
	uid    string
	sample int
}

// episodes is the protocol.Generator of one shard: it names each episode's turn by its
// (uid, sample, turn), hands the batch to the sampler and reports generated tokens.
type episodes struct {
	s      sampler
	seed   int64
	slots  map[*protocol.Episode]slot
	tokens func(n int64) // progress: tokens generated
}

func (g *episodes) Generate(ctx context.Context, contexts [][]int32, eps []*protocol.Episode) ([]protocol.Generation, error) {
	reqs := make([]request, len(eps))
	for i, e := range eps {
		s, ok := g.slots[e]
		if !ok {
			return nil, fmt.Errorf("episode %d of the batch is not of this shard: %w", i, protocol.ErrEpisode)
		}
		reqs[i] = request{UID: s.uid, Sample: s.sample, Turn: e.Turn(), Context: contexts[i],
			Seed: requestSeed(g.seed, s.uid, s.sample, e.Turn())}
	}
	gens, err := g.s.sample(ctx, reqs)
	if err != nil {
		return nil, err
	}
	var n int64
	for _, gen := range gens {
		n += int64(len(gen.IDs))
	}
	if g.tokens != nil {
		g.tokens(n)
	}
	return gens, nil
}

// model is the sampler over the policy checkpoint.
type model struct {
	m        *qwen2.Model
	cfg      sample.Config // with the stop sequences
	maxBatch int
	// carry keeps each trajectory's keys and values from one turn to the next, for a
	// context policy whose every context extends the last (full): a turn then runs
	// only the tokens it adds, not its whole context again. The turn budget's last
	// turn has no next one, so nothing is kept from it.
	carry    bool
	maxTurns int
	pasts    map[slot]*qwen2.Past
}

// close drops the carried keys and values and the model.
func (s *model) close() {
	s.dropPasts(nil)
	s.m.Drop()
}

// dropPasts drops the carried keys and values of every trajectory not in keep: an
// episode that is done is in no later batch.
func (s *model) dropPasts(keep map[slot]bool) {
	for k, p := range s.pasts {
		if !keep[k] {
			p.Drop()
			delete(s.pasts, k)
		}
	}
}

// sample generates every request that fits the model's positions, in batches of
// maxBatch (all at once when 0). A context that already fills max_position_embeddings
// (the full context policy can outgrow a small model) gets an empty, truncated
// response: the turn is recorded with finish "length" and the episode runs out its
// remaining turns without generating, rather than failing the whole shard.
func (s *model) sample(ctx context.Context, reqs []request) ([]protocol.Generation, error) {
	out := make([]protocol.Generation, len(reqs))
	var todo []int
	active := map[slot]bool{}
	for i, r := range reqs {
		if len(r.Context) >= s.m.Config.MaxPositions {
			out[i] = protocol.Generation{IDs: []int32{}, Logprobs: []float32{}, Truncated: true}
			continue
		}
		active[slot{r.UID, r.Sample}] = true
		todo = append(todo, i)
	}
	s.dropPasts(active)
	size := s.maxBatch
	if size <= 0 {
		size = len(todo)
	}
	for lo := 0; lo < len(todo); lo += size {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		batch := todo[lo:min(lo+size, len(todo))]
		qs := make([]qwen2.Request, len(batch))
		for j, i := range batch {
			k := slot{reqs[i].UID, reqs[i].Sample}
			keep := s.carry && reqs[i].Turn+1 < s.maxTurns
			qs[j] = qwen2.Request{Prompt: qwen2.Tokens(reqs[i].Context), Seed: reqs[i].Seed, Past: s.pasts[k], KeepPast: keep}
		}
		comps, err := s.m.Generate(qs, s.cfg)
		if err != nil {
			first := reqs[batch[0]]
			return nil, fmt.Errorf("batch of %d from uid %s sample %d turn %d: %w", len(batch), first.UID, first.Sample, first.Turn, err)
		}
		for j, i := range batch {
			c := comps[j]
			// The turn used its Past; the next turn uses the one it left, if any.
			k := slot{reqs[i].UID, reqs[i].Sample}
			s.pasts[k].Drop()
			delete(s.pasts, k)
			if c.Past != nil {
				s.pasts[k] = c.Past
			}
			ids := make([]int32, len(c.Tokens))
			for k, t := range c.Tokens {
				ids[k] = int32(t)
			}
			out[i] = protocol.Generation{IDs: ids, Logprobs: c.LogProbs, Truncated: c.Finish == qwen2.FinishLength}
		}
	}
	return out, nil
}

// stops are the token sequences that end a turn: the closing tags of the two actions
// (DESIGN.md §6: stop right after the first </search> or </answer>) and the protocol's
// end-of-turn markers (<|im_end|>, <|endoftext|>), which end any chat generation. A tag
// the tokenizer splits into several tokens still stops only when generated in exactly
// this tokenization; the default tags are single special tokens.
func stops(p *protocol.Protocol, tok protocol.Tokenizer) [][]int64 {
	var out [][]int64
	for _, s := range stopStrings(p) {
		ids := tok.Encode(s)
		if len(ids) == 0 {
			continue
		}
		out = append(out, qwen2.Tokens(ids))
	}
	return out
}

// stopStrings are the texts of stops, each once: what a completions server is sent.
func stopStrings(p *protocol.Protocol) []string {
	var out []string
	seen := map[string]bool{}
	for _, s := range append(p.Stops(), p.Trailing...) {
		if s == "" || seen[s] {
			continue
		}
		seen[s] = true
		out = append(out, s)
	}
	return out
}
