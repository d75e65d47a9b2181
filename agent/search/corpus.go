package search

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"hash/fnv"
	"io"
	"os"
	"strings"

	"github.com/klauspost/compress/gzip"
)

// maxLine bounds one corpus line. wiki-18 passages are about 1 KB; anything near
// this size is a file that is not JSONL (a missing newline, a binary file).
const maxLine = 64 << 20

// Doc is one corpus document.
type Doc struct {
	ID       string
	Title    string // first line of Contents without its surrounding quotes
	Text     string // Contents after the first line
	Contents string // as stored in the corpus
}

// Corpus streams the documents of a Search-R1 JSONL corpus: one JSON object per
// line, {"id": "12", "contents": "\"Title\"\ntext"}. Other fields are ignored, blank
// lines are skipped, a ".gz" file is decompressed. Document ids must be unique.
// Corpus is not safe for concurrent use.
type Corpus struct {
	path  string
	f     *os.File
	gz    *gzip.Reader
	raw   io.Reader // the file bytes, teed into sum
	sc    *bufio.Scanner
	sum   hash.Hash
	size  int64
	line  int
	seen  map[uint64]int // fnv-64 of id -> line, for duplicate detection
	ended bool
}

// OpenCorpus opens a corpus file for streaming.
func OpenCorpus(path string) (*Corpus, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("corpus %s: %w", path, err)
	}
	c := &Corpus{path: path, f: f, sum: sha256.New(), seen: make(map[uint64]int)}
	c.raw = io.TeeReader(f, countWriter{c})
	var r io.Reader = c.raw
	if strings.HasSuffix(path, ".gz") {
		c.gz, err = gzip.NewReader(c.raw)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("corpus %s: gzip header: %w: %w", path, err, ErrCorpus)
		}
		r = c.gz
	}
	c.sc = bufio.NewScanner(r)
	c.sc.Buffer(make([]byte, 0, 64<<10), maxLine)
	return c, nil
}

// countWriter feeds the bytes read from the file into the digest and the size.
type countWriter struct{ c *Corpus }

func (w countWriter) Write(p []byte) (int, error) {
	w.c.size += int64(len(p))
	return w.c.sum.Write(p)
}

// Next returns the next document, or io.EOF after the last one. Errors name the file
// and the line and wrap ErrCorpus when the content is at fault.
func (c *Corpus) Next() (Doc, error) {
	for c.sc.Scan() {
		c.line++
		b := c.sc.Bytes()
		if c.line == 1 {
			b = bytes.TrimPrefix(b, []byte("\xef\xbb\xbf")) // UTF-8 byte order mark
		}
		if len(bytes.TrimSpace(b)) == 0 {
			continue
		}
		d, err := parseDoc(b)
		if err != nil {
			return Doc{}, fmt.Errorf("corpus %s: line %d: %w: %w", c.path, c.line, err, ErrCorpus)
		}
		h := fnv.New64a()
		h.Write([]byte(d.ID))
		k := h.Sum64()
		if first, dup := c.seen[k]; dup {
			// A 64-bit hash collision between distinct ids is possible in principle
			// (about 1e-5 for 21M ids); the message names both lines so it is checkable.
			return Doc{}, fmt.Errorf("corpus %s: line %d: id %q already used at line %d; ids must be unique: %w",
				c.path, c.line, d.ID, first, ErrCorpus)
		}
		c.seen[k] = c.line
		return d, nil
	}
	if err := c.sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return Doc{}, fmt.Errorf("corpus %s: line %d: longer than %d bytes; is it JSONL?: %w",
				c.path, c.line+1, maxLine, ErrCorpus)
		}
		return Doc{}, fmt.Errorf("corpus %s: after line %d: %w", c.path, c.line, err)
	}
	if !c.ended {
		c.ended = true
		// Hash any bytes the decompressor left unread so Digest covers the whole file.
		if _, err := io.Copy(io.Discard, c.raw); err != nil {
			return Doc{}, fmt.Errorf("corpus %s: %w", c.path, err)
		}
	}
	return Doc{}, io.EOF
}

// Line is the line number of the document Next returned last (1-based).
func (c *Corpus) Line() int { return c.line }

// Digest is the hex sha256 of the file's bytes read so far; it covers the whole file
// once Next has returned io.EOF.
func (c *Corpus) Digest() string { return hex.EncodeToString(c.sum.Sum(nil)) }

// Size is the number of file bytes read so far.
func (c *Corpus) Size() int64 { return c.size }

// Close releases the file.
func (c *Corpus) Close() error {
	var gzErr error
	if c.gz != nil {
		gzErr = c.gz.Close()
	}
	return errors.Join(gzErr, c.f.Close())
}

// parseDoc decodes one corpus line. The id may be a JSON string or number (corpora
// exported from pandas write numbers); contents must be a string.
func parseDoc(line []byte) (Doc, error) {
	var row struct {
		ID       json.RawMessage `json:"id"`
		Contents *string         `json:"contents"`
	}
	if err := json.Unmarshal(line, &row); err != nil {
		return Doc{}, fmt.Errorf("invalid JSON (%w); want {\"id\": \"…\", \"contents\": \"\\\"Title\\\"\\ntext\"}", err)
	}
	id, err := parseID(row.ID)
	if err != nil {
		return Doc{}, err
	}
	if row.Contents == nil {
		return Doc{}, fmt.Errorf("id %q: missing \"contents\"", id)
	}
	title, text := SplitContents(*row.Contents)
	return Doc{ID: id, Title: title, Text: text, Contents: *row.Contents}, nil
}

func parseID(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", errors.New(`missing "id"`)
	}
	var id string
	switch raw[0] {
	case '"':
		if err := json.Unmarshal(raw, &id); err != nil {
			return "", fmt.Errorf(`"id": %v`, err)
		}
	case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		id = string(raw)
	default:
		return "", fmt.Errorf(`"id" is %s, want a string or a number`, raw)
	}
	if id == "" {
		return "", errors.New(`empty "id"`)
	}
	return id, nil
}
