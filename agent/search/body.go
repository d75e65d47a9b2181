package search

import (
	"errors"
	"io"
)

// errLongString marks a request body holding a string too long to be a query.
var errLongString = errors.New("string too long")

// maxStringBytes is the longest string, as written in JSON, that may decode to a
// query of maxQuery bytes: an escape writes one byte as at most six (\u0000).
func maxStringBytes(maxQuery int) int { return 6*maxQuery + 6 }

// bodyReader passes a request body to the JSON decoder, counting the bytes read and
// failing with errLongString once a string runs past maxString bytes as written. The
// decoder buffers a whole string before it can be measured, so a 15 MB query would
// otherwise cost 15 MB, and its scanning time, before being refused; this cuts it off
// after a few kilobytes. Only the string boundaries are tracked (a quote not escaped
// by a backslash); the JSON itself is the decoder's to check.
type bodyReader struct {
	r         io.Reader
	maxString int
	n         int64 // bytes read
	inString  bool
	escaped   bool
	run       int   // bytes of the current string so far
	err       error // errLongString once returned, for every later read
}

func (b *bodyReader) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	n, err := b.r.Read(p)
	for i, c := range p[:n] {
		if !b.inString {
			b.inString, b.run = c == '"', 0
			continue
		}
		switch {
		case b.escaped:
			b.escaped = false
		case c == '\\':
			b.escaped = true
		case c == '"':
			b.inString = false
			continue
		}
		if b.run++; b.run > b.maxString {
			b.n += int64(i)
			b.err = errLongString
			return i, b.err
		}
	}
	b.n += int64(n)
	return n, err
}
