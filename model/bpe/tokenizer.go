// Package bpe is the byte-level BPE tokenizer of HF tokenizer.json files as Qwen2, Qwen2.5
// and Qwen3 use them: it loads and saves that format, encodes id for id as HF tokenizers
// does (checked against goldens), decodes, and trains small vocabularies for the tiny
// models the project builds.
package bpe

import (
	"cmp"
	"errors"
	"slices"
	"strings"
)

var (
	// ErrFormat marks a tokenizer.json that is not valid HF tokenizer JSON.
	ErrFormat = errors.New("invalid tokenizer.json")
	// ErrUnsupported marks a valid tokenizer.json this package does not implement
	// (another model type, normaliser, pre-tokenizer or decoder).
	ErrUnsupported = errors.New("unsupported tokenizer.json")
	// ErrConfig marks an invalid TrainConfig.
	ErrConfig = errors.New("invalid train config")
)

// Tokenizer is a loaded byte-level BPE tokenizer. It is immutable apart from an internal
// cache and safe for concurrent use.
type Tokenizer struct {
	vocab   map[string]int32 // model vocabulary, byte-level token string -> id
	tokens  []string         // id -> token string (added tokens: their content); "" if unused
	decoded []string         // id -> the bytes Decode writes for it
	added   []addedToken
	merges  map[uint64]rule
	pairs   [][2]int32 // merges in rank order, for Save
	byteID  [256]int32
	pipe    pipeline

	ignoreMerges bool
	cache        cache
	file         file // sections kept verbatim for Save
}

// Encode returns the token ids of s as HF tokenizers' encode(s, add_special_tokens=False)
// does: added and special tokens in s (such as "<|im_end|>") become their ids, and no
// BOS/EOS or template tokens are added. Invalid UTF-8 bytes are encoded as byte tokens.
func (t *Tokenizer) Encode(s string) []int32 {
	ids := make([]int32, 0, len(s)/3+1)
	t.pipe.each(s, func(piece string, id int32) {
		if id >= 0 {
			ids = append(ids, id)
			return
		}
		ids = t.word(ids, piece)
	})
	return ids
}

// word appends the ids of one pre-token.
func (t *Tokenizer) word(dst []int32, w string) []int32 {
	if len(w) == 1 {
		return append(dst, t.byteID[w[0]])
	}
	if ids, ok := t.cache.get(w); ok {
		return append(dst, ids...)
	}
	start := len(dst)
	id, whole := int32(0), false
	if t.ignoreMerges { // Llama-3 style: a pre-token that is itself a token skips merging
		id, whole = t.vocab[byteLevel(w)]
	}
	if whole {
		dst = append(dst, id)
	} else {
		dst = t.mergeWord(dst, w)
	}
	t.cache.put(w, dst[start:])
	return dst
}

// Decode returns the text of ids. Model tokens are mapped back from byte level to bytes
// and concatenated before any UTF-8 decoding, so a character split over several tokens
// comes back whole and bytes that are not valid UTF-8 come back unchanged (HF would
// write U+FFFD for them). Added and special tokens decode to their content. Ids outside
// the vocabulary are skipped, as HF skips them.
func (t *Tokenizer) Decode(ids []int32) string {
	var b strings.Builder
	for _, id := range ids {
		if id >= 0 && int(id) < len(t.decoded) {
			b.WriteString(t.decoded[id])
		}
	}
	return b.String()
}

// TokenString returns the vocabulary entry of id: the byte-level string of a model token
// (e.g. "Ġthe") or the content of an added token.
func (t *Tokenizer) TokenString(id int32) (string, bool) {
	if id < 0 || int(id) >= len(t.tokens) || t.tokens[id] == "" {
		return "", false
	}
	return t.tokens[id], true
}

// ID returns the id of a vocabulary entry as TokenString writes it; added tokens first,
// as HF's token_to_id looks them up.
func (t *Tokenizer) ID(token string) (int32, bool) {
	for _, a := range t.added {
		if a.Content == token {
			return a.ID, true
		}
	}
	id, ok := t.vocab[token]
	return id, ok
}

// VocabSize is one past the highest id of the model vocabulary and the added tokens: the
// least number of rows an embedding matrix for this tokenizer needs.
func (t *Tokenizer) VocabSize() int { return len(t.tokens) }

// Special returns the id of the added token with content name that is marked special,
// e.g. Special("<|im_end|>").
func (t *Tokenizer) Special(name string) (int32, bool) {
	for _, a := range t.added {
		if a.Special && a.Content == name {
			return a.ID, true
		}
	}
	return 0, false
}

// SpecialTokens returns the contents of the special added tokens in id order.
func (t *Tokenizer) SpecialTokens() []string {
	var special []addedToken
	for _, a := range t.added {
		if a.Special {
			special = append(special, a)
		}
	}
	slices.SortStableFunc(special, func(a, b addedToken) int { return cmp.Compare(a.ID, b.ID) })
	out := make([]string, len(special))
	for i, a := range special {
		out[i] = a.Content
	}
	return out
}
