package protocol

import "strings"

// byteTok is a byte-level test tokenizer: each special string is one token (id 256+i),
// every other byte is its own token (id = byte). Encoding is context-free, so the ids of
// a substring equal the matching sub-slice of the whole text's ids — which lets tests
// state expected contexts from text alone.
type byteTok struct{ specials []string }

func newByteTok(specials ...string) byteTok { return byteTok{specials} }

// tagTok makes the protocol's tags and the ChatML markers special tokens.
func tagTok(p *Protocol) byteTok {
	var sp []string
	for _, t := range []Tag{p.Memory, p.Think, p.Search, p.Answer} {
		if t.Open != "" {
			sp = append(sp, t.Open, t.Close)
		}
	}
	return newByteTok(append(sp, "<|im_start|>", "<|im_end|>", "<information>", "</information>")...)
}

func (t byteTok) Encode(s string) []int32 {
	var ids []int32
	for i := 0; i < len(s); {
		matched := false
		for j, sp := range t.specials {
			if strings.HasPrefix(s[i:], sp) {
				ids = append(ids, int32(256+j))
				i += len(sp)
				matched = true
				break
			}
		}
		if !matched {
			ids = append(ids, int32(s[i]))
			i++
		}
	}
	return ids
}

func (t byteTok) Decode(ids []int32) string {
	var b strings.Builder
	for _, id := range ids {
		if id >= 256 {
			b.WriteString(t.specials[id-256])
		} else {
			b.WriteByte(byte(id))
		}
	}
	return b.String()
}
