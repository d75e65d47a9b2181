package engine

import (
	"slices"

	"github.com/mempo/mempo/model/qwen2"
)

// prefixes is an Engine's store of finished sequences' keys and values
// (Config.PrefixCache): a sequence whose prompt begins with the tokens of one
// prefills only the rest, as a full-context agent's next turn, which extends its last
// turn's prompt and completion, or another sample of a prompt already served. It holds
// at most budget tokens, least recently used out first, in host memory (see
// qwen2.Past).
type prefixes struct {
	budget int
	held   int           // tokens
	pasts  []*qwen2.Past // least recently used first
	stats  PrefixStats
}

// PrefixStats counts an Engine's reuse of finished sequences' keys and values.
type PrefixStats struct {
	// Hits is the sequences whose prefill started from a stored prefix, and Reused the
	// prompt tokens they did not run.
	Hits, Reused int
	// Held is the tokens stored now.
	Held int
}

// add stores p, dropping the pasts p extends (a turn's Past supersedes its last
// turn's) and then the least recently used while over budget; a Past over the whole
// budget is dropped.
func (s *prefixes) add(p *qwen2.Past) {
	if p.Len() > s.budget {
		p.Drop()
		return
	}
	s.pasts = slices.DeleteFunc(s.pasts, func(x *qwen2.Past) bool {
		if x.Len() <= p.Len() && slices.Equal(x.Tokens(), p.Tokens()[:x.Len()]) {
			s.held -= x.Len()
			x.Drop()
			return true
		}
		return false
	})
	s.pasts = append(s.pasts, p)
	s.held += p.Len()
	for s.held > s.budget {
		s.held -= s.pasts[0].Len()
		s.pasts[0].Drop()
		s.pasts = s.pasts[1:]
	}
}

// best returns the stored Past that serves most of prompt's leading tokens and how
// many (nil and 0 when none does): their common prefix, less one when that is the
// whole prompt, since the last prompt token must run to give the first logits.
func (s *prefixes) best(prompt []int64) (*qwen2.Past, int) {
	var best *qwen2.Past
	most := 0
	for _, p := range s.pasts {
		ids, n := p.Tokens(), 0
		for n < len(ids) && n < len(prompt) && ids[n] == prompt[n] {
			n++
		}
		if n = min(n, len(prompt)-1); n > most {
			best, most = p, n
		}
	}
	return best, most
}

// use marks p, which served n prompt tokens of a prefill, most recently used.
func (s *prefixes) use(p *qwen2.Past, n int) {
	if at := slices.Index(s.pasts, p); at >= 0 {
		s.pasts = append(slices.Delete(s.pasts, at, at+1), p)
	}
	s.stats.Hits++
	s.stats.Reused += n
}

// drop frees every stored Past.
func (s *prefixes) drop() {
	for _, p := range s.pasts {
		p.Drop()
	}
	s.pasts, s.held = nil, 0
}
