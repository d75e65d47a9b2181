package qwen2

import "slices"

// prefixes is an Engine's store of finished sequences' keys and values
// (EngineConfig.PrefixCache): a sequence whose prompt begins with the tokens of one
// prefills only the rest, as a full-context agent's next turn, which extends its last
// turn's prompt and completion, or another sample of a prompt already served. It holds
// at most budget tokens, least recently used out first, in host memory (see Past).
type prefixes struct {
	budget int
	held   int     // tokens
	pasts  []*Past // least recently used first
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
func (s *prefixes) add(p *Past) {
	if p.Len() > s.budget {
		p.Drop()
		return
	}
	s.pasts = slices.DeleteFunc(s.pasts, func(x *Past) bool {
		if x.Len() <= p.Len() && slices.Equal(x.ids, p.ids[:x.Len()]) {
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
// many (nil and 0 when none does), and marks it used.
func (s *prefixes) best(prompt []int64) (*Past, int) {
	at, most := -1, 0
	for i, p := range s.pasts {
		if n := p.reuse(prompt); n > most {
			at, most = i, n
		}
	}
	if at < 0 {
		return nil, 0
	}
	p := s.pasts[at]
	s.pasts = append(slices.Delete(s.pasts, at, at+1), p)
	s.stats.Hits++
	s.stats.Reused += most
	return p, most
}

// drop frees every stored Past.
func (s *prefixes) drop() {
	for _, p := range s.pasts {
		p.Drop()
	}
	s.pasts, s.held = nil, 0
}
