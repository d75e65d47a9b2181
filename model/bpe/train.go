package bpe

import (
	"encoding/json"
	"fmt"
	"iter"
	"maps"
	"slices"
	"strings"
)

// TrainConfig configures Train.
type TrainConfig struct {
	// VocabSize is the most ids the tokenizer gets: the special tokens, the 256 byte
	// tokens and the merges learned. Training stops earlier when no pair occurs
	// MinFrequency times.
	VocabSize int `json:"vocab_size"`
	// Special are the added tokens, which Encode never splits, with ids 0, 1, … in this
	// order. Those of the form <|…|> (control tokens) are marked special, so that HF's
	// decode(skip_special_tokens=True) drops them; the others (the agent protocol's
	// tags) are not, as Qwen3's tokenizer does not mark <think>: a server decoding with
	// skip_special_tokens keeps the agent's tags in its text. Nil means DefaultSpecial().
	Special []string `json:"special"`
	// MinFrequency is how often a pair must occur in the corpus to be merged; below 1
	// means 1.
	MinFrequency int `json:"min_frequency"`
}

// DefaultSpecial returns the added tokens of the project's tokenizers: Qwen's ChatML
// and end-of-text markers (special), then the agent protocol's tags (not special).
func DefaultSpecial() []string {
	return []string{EndOfText, ImStart, ImEnd,
		"<mem>", "</mem>", "<think>", "</think>", "<search>", "</search>",
		"<answer>", "</answer>", "<information>", "</information>"}
}

// Train learns a byte-level BPE tokenizer from texts with Qwen2's normaliser (NFC) and
// pre-tokenizer, so it splits text exactly as Qwen's tokenizers do. It follows HF's
// BpeTrainer: special tokens first, then the 256 byte tokens in code point order, then
// one token per merge of the most frequent adjacent pair. Ties go to the pair whose ids
// are smallest, so the same texts and config always give the same tokenizer. Pair counts
// are updated incrementally: each merge touches only the words that contain the pair.
func Train(texts iter.Seq[string], cfg TrainConfig) (*Tokenizer, error) {
	special := cfg.Special
	if special == nil {
		special = DefaultSpecial()
	}
	if err := checkTrainConfig(cfg, special); err != nil {
		return nil, fmt.Errorf("bpe: train: %w", err)
	}
	f := trainFile(special)
	pipe, err := filePipeline(&f)
	if err != nil {
		return nil, fmt.Errorf("bpe: train: %w", err)
	}

	// Count pre-tokens; special tokens in the texts are atomic and take no part.
	counts := make(map[string]int64)
	for text := range texts {
		pipe.each(text, func(piece string, id int32) {
			if id >= 0 {
				return
			}
			if c, ok := counts[piece]; ok {
				counts[piece] = c + 1
			} else {
				counts[strings.Clone(piece)] = 1
			}
		})
	}

	vocab := make(map[string]int32, cfg.VocabSize)
	tokens := make([]string, 0, cfg.VocabSize)
	add := func(tok string) int32 {
		id := int32(len(tokens))
		vocab[tok] = id
		tokens = append(tokens, tok)
		return id
	}
	for _, s := range special {
		add(s)
	}
	alphabet := slices.Clone(byteRune[:])
	slices.Sort(alphabet)
	var byteID [256]int32
	for _, r := range alphabet {
		byteID[runeByte[r]] = add(string(r))
	}

	words := slices.Sorted(maps.Keys(counts))
	tr := trainer{
		words:  make([][]int32, len(words)),
		counts: make([]int64, len(words)),
		pairs:  make(map[uint64]int64),
		where:  make(map[uint64][]int32),
		seen:   make([]int32, len(words)),
		heap:   heap[pairCount]{before: pairBefore},
	}
	for i, w := range words {
		syms := make([]int32, len(w))
		for j := 0; j < len(w); j++ {
			syms[j] = byteID[w[j]]
		}
		tr.words[i], tr.counts[i] = syms, counts[w]
		for j := 0; j+1 < len(syms); j++ {
			tr.count(pairKey(syms[j], syms[j+1]), counts[w], int32(i))
		}
	}
	for k, c := range tr.pairs {
		tr.heap.push(pairCount{count: c, key: k})
	}

	minFreq := max(int64(cfg.MinFrequency), 1)
	var merges [][2]string
	for len(tokens) < cfg.VocabSize && tr.heap.len() > 0 {
		top := tr.heap.pop()
		cur := tr.pairs[top.key]
		if cur != top.count {
			// Stale entry: counts of existing pairs only fall, so requeue at the current
			// count and the true maximum still surfaces first.
			if cur > 0 {
				tr.heap.push(pairCount{count: cur, key: top.key})
			}
			continue
		}
		if cur < minFreq {
			break
		}
		left, right := int32(top.key>>32), int32(uint32(top.key))
		merged := tokens[left] + tokens[right]
		id, ok := vocab[merged]
		if !ok {
			id = add(merged)
		}
		merges = append(merges, [2]string{tokens[left], tokens[right]})
		tr.merge(top.key, id)
	}

	f.Model.Vocab = vocab
	t, err := build(&f, merges)
	if err != nil {
		return nil, fmt.Errorf("bpe: train: %w", err)
	}
	return t, nil
}

func checkTrainConfig(cfg TrainConfig, special []string) error {
	seen := make(map[string]bool, len(special))
	for i, s := range special {
		if s == "" {
			return fmt.Errorf("special[%d]: empty token: %w", i, ErrConfig)
		}
		if seen[s] {
			return fmt.Errorf("special[%d]: %q listed twice: %w", i, s, ErrConfig)
		}
		seen[s] = true
	}
	if floor := len(special) + 256; cfg.VocabSize < floor {
		return fmt.Errorf("vocab_size %d is below %d special tokens + 256 byte tokens; raise vocab_size to at least %d: %w",
			cfg.VocabSize, len(special), floor, ErrConfig)
	}
	if cfg.MinFrequency < 0 {
		return fmt.Errorf("min_frequency %d is negative: %w", cfg.MinFrequency, ErrConfig)
	}
	return nil
}

// trainFile is the tokenizer.json skeleton of a trained tokenizer: Qwen2's normaliser,
// pre-tokenizer, post-processor and decoder, and the special tokens.
func trainFile(special []string) file {
	raw := func(v any) json.RawMessage {
		b, err := json.Marshal(v)
		if err != nil {
			panic(err) // static values of basic types always marshal
		}
		return b
	}
	byteLevelStep := map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}
	f := file{
		Version:    "1.0",
		Normalizer: raw(map[string]any{"type": "NFC"}),
		PreTokenizer: raw(map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Split", "pattern": map[string]any{"Regex": Qwen2Pattern}, "behavior": "Isolated", "invert": false},
			byteLevelStep,
		}}),
		PostProcessor: raw(byteLevelStep),
		Decoder:       raw(byteLevelStep),
		Model:         model{Type: "BPE"},
	}
	for i, s := range special {
		f.AddedTokens = append(f.AddedTokens, addedToken{ID: int32(i), Content: s, Special: isControl(s)})
	}
	return f
}

// filePipeline builds the text pipeline of a file skeleton, the same code path Load uses.
func filePipeline(f *file) (pipeline, error) {
	var p pipeline
	var err error
	if p.norm, err = parseNormalizer(f.Normalizer, "normalizer"); err != nil {
		return p, err
	}
	if p.pre, err = parsePreTokenizer(f.PreTokenizer, "pre_tokenizer"); err != nil {
		return p, err
	}
	p.raw = newMatcher(f.AddedTokens, func(a addedToken) bool { return !a.Normalized })
	p.normd = newMatcher(f.AddedTokens, func(a addedToken) bool { return a.Normalized })
	return p, nil
}

// trainer holds the corpus as symbol sequences with the counts of adjacent pairs.
type trainer struct {
	words  [][]int32
	counts []int64            // occurrences of each word in the corpus
	pairs  map[uint64]int64   // pair -> occurrences in the corpus
	where  map[uint64][]int32 // pair -> words that contain or once contained it
	seen   []int32            // word -> last merge that visited it
	stamp  int32
	heap   heap[pairCount]
	delta  map[uint64]int64
}

// count adds c occurrences of pair k in word w.
func (tr *trainer) count(k uint64, c int64, w int32) {
	tr.pairs[k] += c
	if ws := tr.where[k]; len(ws) == 0 || ws[len(ws)-1] != w {
		tr.where[k] = append(ws, w)
	}
}

// merge replaces every occurrence of pair k by id and updates the pair counts of the
// words it touched.
func (tr *trainer) merge(k uint64, id int32) {
	left, right := int32(k>>32), int32(uint32(k))
	tr.stamp++
	if tr.delta == nil {
		tr.delta = make(map[uint64]int64)
	}
	clear(tr.delta)
	for _, wi := range tr.where[k] {
		if tr.seen[wi] == tr.stamp {
			continue
		}
		tr.seen[wi] = tr.stamp
		w, c := tr.words[wi], tr.counts[wi]
		change := func(p uint64, d int64) {
			tr.delta[p] += d
			if d > 0 {
				if ws := tr.where[p]; len(ws) == 0 || ws[len(ws)-1] != wi {
					tr.where[p] = append(ws, wi)
				}
			}
		}
		// Compact in place: out never overtakes the read position.
		out := w[:0]
		for i := 0; i < len(w); {
			if i+1 < len(w) && w[i] == left && w[i+1] == right {
				if n := len(out); n > 0 {
					change(pairKey(out[n-1], left), -c)
					change(pairKey(out[n-1], id), c)
				}
				if i+2 < len(w) {
					change(pairKey(right, w[i+2]), -c)
					change(pairKey(id, w[i+2]), c)
				}
				out = append(out, id)
				i += 2
				continue
			}
			out = append(out, w[i])
			i++
		}
		tr.words[wi] = out
	}
	delete(tr.pairs, k)
	delete(tr.where, k)
	for p, d := range tr.delta {
		if p == k || d == 0 {
			continue
		}
		c := tr.pairs[p] + d
		if c <= 0 {
			delete(tr.pairs, p)
			delete(tr.where, p)
			continue
		}
		tr.pairs[p] = c
		if int32(p>>32) == id || int32(uint32(p)) == id {
			tr.heap.push(pairCount{count: c, key: p})
		}
	}
}

// pairCount is a heap entry; entries go stale when counts fall and are requeued on pop.
type pairCount struct {
	count int64
	key   uint64
}

// pairBefore orders the pair heap as a max-heap by count; equal counts pop the smaller (left, right) ids first,
// which is HF's tie-break and makes training deterministic.
func pairBefore(a, b pairCount) bool {
	return a.count > b.count || a.count == b.count && a.key < b.key
}

// isControl reports whether an added token is a control token, <|…|>, which the
// project's tokenizers mark special (see TrainConfig.Special).
func isControl(s string) bool {
	return len(s) > 4 && strings.HasPrefix(s, "<|") && strings.HasSuffix(s, "|>")
}
