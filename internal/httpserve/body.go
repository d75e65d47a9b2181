package httpserve

import (
	"io"
	"net/http"
)

// maxDrainBytes is how much of an unread body net/http reads and discards after a
// handler returns to keep the connection alive (its maxPostHandlerReadBytes).
const maxDrainBytes = 256 << 10

// FinishBody readies a refused request's connection for its answer while the client
// may still be sending the body, limited: the request body under its MaxBytesReader,
// of which read bytes were read. A body within maxBody is read to its end and thrown
// away, so that a client that writes its whole body before it reads (Python's
// http.client) reads the answer, not a broken pipe; that costs reading at most
// maxBody bytes, within the read timeout, and holds none of them. A body declared
// over maxBody is left unread, its connection to linger and close (lingerIfUnread).
// A client that waits for "100 Continue" has sent nothing yet and is left alone.
func FinishBody(w http.ResponseWriter, req *http.Request, limited io.Reader, read, maxBody int64) {
	if req.Header.Get("Expect") != "" {
		return
	}
	if req.ContentLength <= maxBody {
		io.Copy(io.Discard, limited) // to EOF, or a MaxBytesError past maxBody for an undeclared length
		return
	}
	lingerIfUnread(w, req, read)
}

// lingerIfUnread prepares a refused request's connection to close gracefully when much
// of its body, read bytes read so far, is still unread. A client still sending that
// body would see the connection reset, and lose the answer, if the server closed it at
// once, as net/http does for a "Connection: close" request. Reading one more byte
// through a MaxBytesReader of limit 0 marks the response as over the limit: net/http
// then half-closes the connection and lingers before closing it, so the client reads
// its answer. A client that waits for "100 Continue" has sent nothing yet and is left
// alone, as is a small remainder, which net/http drains itself.
func lingerIfUnread(w http.ResponseWriter, req *http.Request, read int64) {
	if req.Header.Get("Expect") != "" {
		return
	}
	if req.ContentLength >= 0 && req.ContentLength-read < maxDrainBytes {
		return
	}
	http.MaxBytesReader(w, req.Body, 0).Read(make([]byte, 1)) // at EOF, or a MaxBytesError
}
