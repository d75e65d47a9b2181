package bpe

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"unicode/utf8"

	"github.com/mempo/mempo/internal/renameio"
)

// file is a parsed tokenizer.json. The sections this package only checks or ignores are
// kept as raw JSON so Save writes them back unchanged.
type file struct {
	Version       string          `json:"version"`
	Truncation    json.RawMessage `json:"truncation"`
	Padding       json.RawMessage `json:"padding"`
	AddedTokens   []addedToken    `json:"added_tokens"`
	Normalizer    json.RawMessage `json:"normalizer"`
	PreTokenizer  json.RawMessage `json:"pre_tokenizer"`
	PostProcessor json.RawMessage `json:"post_processor"`
	Decoder       json.RawMessage `json:"decoder"`
	Model         model           `json:"model"`
}

type model struct {
	Type                    string           `json:"type"`
	Dropout                 *float64         `json:"dropout"`
	UnkToken                *string          `json:"unk_token"`
	ContinuingSubwordPrefix *string          `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string          `json:"end_of_word_suffix"`
	FuseUnk                 bool             `json:"fuse_unk"`
	ByteFallback            bool             `json:"byte_fallback"`
	IgnoreMerges            bool             `json:"ignore_merges"`
	Vocab                   map[string]int32 `json:"vocab"`
	Merges                  json.RawMessage  `json:"merges"`
}

// Load reads an HF tokenizer.json with a byte-level BPE model.
func Load(path string) (*Tokenizer, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("bpe: load: %w", err)
	}
	return Parse(data, path)
}

// Parse reads tokenizer.json content; name (a path, or e.g. "embedded") labels errors.
func Parse(data []byte, name string) (*Tokenizer, error) {
	var f file
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("bpe: load %s: %w: %w", name, err, ErrFormat)
	}
	pairs, err := parseMerges(f.Model.Merges)
	if err != nil {
		return nil, fmt.Errorf("bpe: load %s: %w", name, err)
	}
	t, err := build(&f, pairs)
	if err != nil {
		return nil, fmt.Errorf("bpe: load %s: %w", name, err)
	}
	return t, nil
}

// parseMerges accepts both merge formats HF writes: ["a b", ...] and [["a", "b"], ...].
func parseMerges(raw json.RawMessage) ([][2]string, error) {
	if isNull(raw) {
		return nil, nil
	}
	var pairs [][2]string
	if err := json.Unmarshal(raw, &pairs); err == nil {
		return pairs, nil
	}
	var lines []string
	if err := json.Unmarshal(raw, &lines); err != nil {
		return nil, fmt.Errorf("model.merges: neither [\"a b\", ...] nor [[\"a\", \"b\"], ...]: %w", ErrFormat)
	}
	pairs = make([][2]string, len(lines))
	for i, l := range lines {
		a, b, ok := strings.Cut(l, " ")
		if !ok || strings.Contains(b, " ") {
			return nil, fmt.Errorf("model.merges[%d]: %q is not two tokens separated by one space: %w", i, l, ErrFormat)
		}
		pairs[i] = [2]string{a, b}
	}
	return pairs, nil
}

// build checks a parsed file and makes the Tokenizer; errors name the JSON field.
func build(f *file, merges [][2]string) (*Tokenizer, error) {
	m := &f.Model
	switch {
	case m.Type != "BPE" && m.Type != "":
		return nil, fmt.Errorf("model.type: %q, want BPE: %w", m.Type, ErrUnsupported)
	case m.Dropout != nil && *m.Dropout != 0:
		return nil, fmt.Errorf("model.dropout: %v, want null: dropout makes encoding random: %w", *m.Dropout, ErrUnsupported)
	case m.ContinuingSubwordPrefix != nil && *m.ContinuingSubwordPrefix != "":
		return nil, fmt.Errorf("model.continuing_subword_prefix: %q, want \"\": %w", *m.ContinuingSubwordPrefix, ErrUnsupported)
	case m.EndOfWordSuffix != nil && *m.EndOfWordSuffix != "":
		return nil, fmt.Errorf("model.end_of_word_suffix: %q, want \"\": %w", *m.EndOfWordSuffix, ErrUnsupported)
	case m.ByteFallback:
		return nil, fmt.Errorf("model.byte_fallback: true is SentencePiece-style <0x..> fallback, not byte-level BPE: %w", ErrUnsupported)
	case len(m.Vocab) == 0:
		return nil, fmt.Errorf("model.vocab: empty: %w", ErrFormat)
	}
	if err := checkDecoder(f.Decoder); err != nil {
		return nil, err
	}
	t := &Tokenizer{
		vocab:        m.Vocab,
		added:        f.AddedTokens,
		merges:       make(map[uint64]rule, len(merges)),
		pairs:        make([][2]int32, len(merges)),
		ignoreMerges: m.IgnoreMerges,
		file:         *f,
	}
	t.file.Model.Vocab, t.file.Model.Merges = nil, nil

	size := 0
	for tok, id := range m.Vocab {
		if id < 0 {
			return nil, fmt.Errorf("model.vocab[%q]: id %d is negative: %w", tok, id, ErrFormat)
		}
		size = max(size, int(id)+1)
	}
	for i, a := range f.AddedTokens {
		if a.ID < 0 || a.Content == "" {
			return nil, fmt.Errorf("added_tokens[%d]: id %d content %q, want id >= 0 and content non-empty: %w", i, a.ID, a.Content, ErrFormat)
		}
		size = max(size, int(a.ID)+1)
	}
	t.tokens = make([]string, size)
	t.decoded = make([]string, size)
	for tok, id := range m.Vocab {
		if prev := t.tokens[id]; prev != "" {
			a, b := min(prev, tok), max(prev, tok) // map order is random; the message is not
			return nil, fmt.Errorf("model.vocab: %q and %q both have id %d: %w", a, b, id, ErrFormat)
		}
		if tok == "" {
			return nil, fmt.Errorf("model.vocab: empty token with id %d: %w", id, ErrFormat)
		}
		t.tokens[id] = tok
		t.decoded[id] = unByteLevel(tok)
	}
	for i, a := range f.AddedTokens {
		if prev := t.tokens[a.ID]; prev != "" && prev != a.Content {
			return nil, fmt.Errorf("added_tokens[%d]: id %d is %q here and %q in model.vocab: %w", i, a.ID, a.Content, prev, ErrFormat)
		}
		t.tokens[a.ID] = a.Content
		t.decoded[a.ID] = a.Content
	}
	for b := range 256 {
		id, ok := m.Vocab[string(byteRune[b])]
		if !ok {
			return nil, fmt.Errorf("model.vocab: no token %q for byte 0x%02x; a byte-level vocabulary holds all 256: %w",
				string(byteRune[b]), b, ErrFormat)
		}
		t.byteID[b] = id
	}
	for i, p := range merges {
		l, okl := m.Vocab[p[0]]
		r, okr := m.Vocab[p[1]]
		id, okm := m.Vocab[p[0]+p[1]]
		if !okl || !okr || !okm {
			return nil, fmt.Errorf("model.merges[%d]: %q + %q: a token or the merged %q is not in model.vocab: %w",
				i, p[0], p[1], p[0]+p[1], ErrFormat)
		}
		// A repeated pair keeps its last rank, as HF's merge map does.
		t.merges[pairKey(l, r)] = rule{rank: int32(i), id: id}
		t.pairs[i] = [2]int32{l, r}
	}

	var err error
	if t.pipe, err = filePipeline(f); err != nil {
		return nil, err
	}
	return t, nil
}

// checkDecoder accepts the ByteLevel decoder, alone or as the only step of a Sequence.
func checkDecoder(raw json.RawMessage) error {
	var d struct {
		Type     string  `json:"type"`
		Decoders []typed `json:"decoders"`
	}
	if !isNull(raw) {
		if err := json.Unmarshal(raw, &d); err != nil {
			return fmt.Errorf("decoder: %w: %w", err, ErrFormat)
		}
	}
	if d.Type == "ByteLevel" || d.Type == "Sequence" && len(d.Decoders) == 1 && d.Decoders[0].Type == "ByteLevel" {
		return nil
	}
	return fmt.Errorf("decoder: type %q, want ByteLevel: not a byte-level BPE tokenizer: %w", d.Type, ErrUnsupported)
}

// Save writes t as an HF tokenizer.json that HF tokenizers and transformers load. It
// writes a temporary file beside path, syncs it and renames it over path, so path is
// never half written. Vocabulary entries are written in id order and merges in rank
// order, so the same tokenizer always gives the same bytes.
func (t *Tokenizer) Save(path string) error {
	data, err := t.marshal()
	if err != nil {
		return fmt.Errorf("bpe: save %s: %w", path, err)
	}
	if err := renameio.WriteFile(path, data); err != nil {
		return fmt.Errorf("bpe: save: %w", err)
	}
	return nil
}

// orderedVocab marshals the model vocabulary as a JSON object in id order.
type orderedVocab []string

func (v orderedVocab) MarshalJSON() ([]byte, error) {
	b := []byte{'{'}
	first := true
	for id, tok := range v {
		if tok == "" {
			continue
		}
		if !first {
			b = append(b, ',')
		}
		first = false
		b = appendQuoted(b, tok)
		b = append(b, ':')
		b = fmt.Appendf(b, "%d", id)
	}
	return append(b, '}'), nil
}

// appendQuoted appends s as a JSON string, escaping only what JSON requires, so tokens
// such as "<|im_end|>" stay readable (encoding/json would write \u003c).
func appendQuoted(b []byte, s string) []byte {
	b = append(b, '"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b = append(b, '\\', byte(r))
		case r == '\n':
			b = append(b, '\\', 'n')
		case r == '\r':
			b = append(b, '\\', 'r')
		case r == '\t':
			b = append(b, '\\', 't')
		case r < 0x20:
			b = fmt.Appendf(b, `\u%04x`, r)
		default:
			b = utf8.AppendRune(b, r)
		}
	}
	return append(b, '"')
}

func (t *Tokenizer) marshal() ([]byte, error) {
	vocab := make(orderedVocab, len(t.tokens))
	for tok, id := range t.vocab {
		vocab[id] = tok
	}
	// "a b" lines load in every HF tokenizers release; pairs only from 0.20. Byte-level
	// tokens never contain a space (it maps to "Ġ"), so lines are always possible for
	// files this package accepts, unless a vocabulary holds raw spaces.
	var merges any
	lines := make([]string, len(t.pairs))
	for i, p := range t.pairs {
		a, b := t.tokens[p[0]], t.tokens[p[1]]
		if strings.Contains(a, " ") || strings.Contains(b, " ") {
			lines = nil
			break
		}
		lines[i] = a + " " + b
	}
	if lines != nil {
		merges = lines
	} else {
		pairs := make([][2]string, len(t.pairs))
		for i, p := range t.pairs {
			pairs[i] = [2]string{t.tokens[p[0]], t.tokens[p[1]]}
		}
		merges = pairs
	}
	orNull := func(raw json.RawMessage) json.RawMessage {
		if isNull(raw) {
			return json.RawMessage("null")
		}
		return raw
	}
	f := t.file
	m := f.Model
	version := f.Version
	if version == "" {
		version = "1.0"
	}
	typ := m.Type
	if typ == "" {
		typ = "BPE"
	}
	out := struct {
		Version       string          `json:"version"`
		Truncation    json.RawMessage `json:"truncation"`
		Padding       json.RawMessage `json:"padding"`
		AddedTokens   []addedToken    `json:"added_tokens"`
		Normalizer    json.RawMessage `json:"normalizer"`
		PreTokenizer  json.RawMessage `json:"pre_tokenizer"`
		PostProcessor json.RawMessage `json:"post_processor"`
		Decoder       json.RawMessage `json:"decoder"`
		Model         struct {
			Type                    string       `json:"type"`
			Dropout                 *float64     `json:"dropout"`
			UnkToken                *string      `json:"unk_token"`
			ContinuingSubwordPrefix string       `json:"continuing_subword_prefix"`
			EndOfWordSuffix         string       `json:"end_of_word_suffix"`
			FuseUnk                 bool         `json:"fuse_unk"`
			ByteFallback            bool         `json:"byte_fallback"`
			IgnoreMerges            bool         `json:"ignore_merges"`
			Vocab                   orderedVocab `json:"vocab"`
			Merges                  any          `json:"merges"`
		} `json:"model"`
	}{
		Version: version, Truncation: orNull(f.Truncation), Padding: orNull(f.Padding),
		AddedTokens: f.AddedTokens, Normalizer: orNull(f.Normalizer), PreTokenizer: orNull(f.PreTokenizer),
		PostProcessor: orNull(f.PostProcessor), Decoder: orNull(f.Decoder),
	}
	if out.AddedTokens == nil {
		out.AddedTokens = []addedToken{}
	}
	out.Model.Type = typ
	out.Model.UnkToken = m.UnkToken
	out.Model.FuseUnk = m.FuseUnk
	out.Model.IgnoreMerges = t.ignoreMerges
	out.Model.Vocab = vocab
	out.Model.Merges = merges

	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(out); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
