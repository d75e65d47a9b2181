package search

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"

	"github.com/mempo/mempo/internal/httpserve"
)

// NewHandler serves r under the Search-R1 retrieval API: POST /retrieve (see
// api.go) and GET /health, within cfg's limits. A refused request gets
// {"error": "…", "detail": "…"} (the same message twice: "detail" is what FastAPI's
// validation errors carry) naming the limit and its flag: 413 for a body over
// MaxBodyBytes, 400 for a malformed request or a field over its limit, 408 for a body
// not received within the read timeout, and 503, with Retry-After, when MaxInflight
// requests are already in flight. /health is not counted against MaxInflight. The body
// is read as it is decoded and refused as soon as it breaks a limit: a query far over
// MaxQueryBytes after a few kilobytes, rather than once the decoder has buffered it.
func NewHandler(r Retriever, cfg ServerConfig, log *slog.Logger) http.Handler {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cfg = cfg.withDefaults()
	h := &handler{r: r, cfg: cfg, log: log, slots: make(chan struct{}, cfg.MaxInflight),
		bodies: httpserve.NewBudget(int64(cfg.MaxInflight) * cfg.MaxBodyBytes)}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /retrieve", h.retrieve)
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	return mux
}

type handler struct {
	r   Retriever
	cfg ServerConfig
	log *slog.Logger
	// slots holds one token per request being searched, MaxInflight at most.
	slots chan struct{}
	// bodies is the bytes of the bodies being read, MaxInflight×MaxBodyBytes at most.
	bodies *httpserve.Budget
}

// requestError is a refused request: its status and the message its client gets.
type requestError struct {
	status int
	msg    string
}

func (e *requestError) Error() string { return e.msg }

func refuse(status int, format string, args ...any) *requestError {
	return &requestError{status: status, msg: fmt.Sprintf(format, args...)}
}

func (h *handler) retrieve(w http.ResponseWriter, req *http.Request) {
	limited := http.MaxBytesReader(w, req.Body, h.cfg.MaxBodyBytes)
	counted := h.bodies.Reader(limited)
	defer counted.Release()
	body := &bodyReader{r: counted, maxString: maxStringBytes(h.cfg.MaxQueryBytes)}
	if e := h.answer(w, req, body); e != nil {
		httpserve.FinishBody(w, req, limited, body.n, h.cfg.MaxBodyBytes)
		h.fail(w, e)
	}
}

// answer serves one /retrieve request, or returns why it is refused.
func (h *handler) answer(w http.ResponseWriter, req *http.Request, body *bodyReader) *requestError {
	if req.ContentLength > h.cfg.MaxBodyBytes {
		return refuse(http.StatusRequestEntityTooLarge, "body of %d bytes, larger than %d bytes (--max-body-bytes)",
			req.ContentLength, h.cfg.MaxBodyBytes)
	}
	// The body is read before a slot is taken, so that clients stalling mid-body hold
	// no slot (only the bytes they sent, within the bodies' budget), and a full server
	// refuses at once instead of queueing without bound.
	in, err := h.decodeRequest(body)
	if err != nil {
		return h.classify(err)
	}
	topk := h.cfg.DefaultTopK
	if in.TopK != nil && *in.TopK != 0 {
		topk = *in.TopK
	}
	if topk < 1 || topk > h.cfg.MaxTopK {
		return refuse(http.StatusBadRequest, "topk %d, want 1..%d (--max-topk)", topk, h.cfg.MaxTopK)
	}
	select {
	case h.slots <- struct{}{}:
		defer func() { <-h.slots }()
	default:
		return h.busy()
	}
	// Past the write timeout the answer can no longer be sent: stop searching then.
	ctx, cancel := context.WithTimeout(req.Context(), httpserve.Seconds(h.cfg.WriteTimeoutS))
	defer cancel()
	hits, err := h.r.Retrieve(ctx, in.Queries, topk)
	if err != nil {
		switch {
		case errors.Is(err, ErrBadRequest):
			return refuse(http.StatusBadRequest, "%v", err)
		case req.Context().Err() != nil:
			h.log.Debug("client left during retrieval", "queries", len(in.Queries), "err", err)
			return nil
		case ctx.Err() != nil:
			h.log.Warn("retrieval outlasted the write timeout", "queries", len(in.Queries), "timeout_s", h.cfg.WriteTimeoutS)
			return refuse(http.StatusServiceUnavailable, "%d queries not answered within %gs (--write-timeout): %v",
				len(in.Queries), h.cfg.WriteTimeoutS, err)
		}
		h.log.Error("retrieval failed", "queries", len(in.Queries), "err", err)
		return refuse(http.StatusInternalServerError, "%v", err)
	}
	result := make([][]any, len(hits))
	for i, list := range hits {
		result[i] = make([]any, len(list))
		for j, hit := range list {
			doc := apiDoc{ID: hit.ID, Contents: hit.contents()}
			if in.ReturnScores {
				result[i][j] = apiScored{Document: doc, Score: hit.Score}
			} else {
				result[i][j] = doc
			}
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"result": result})
	return nil
}

// decodeRequest reads a /retrieve body token by token, so that one query too many
// stops the read there, and the request holds no more than its limits allow, rather
// than all that a body of tiny queries would expand to. Keys match exactly, as
// pydantic matches them; unknown keys are skipped.
func (h *handler) decodeRequest(body io.Reader) (apiRequest, error) {
	var in apiRequest
	dec := json.NewDecoder(body)
	if err := expectDelim(dec, '{', "body"); err != nil {
		return in, err
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return in, err
		}
		switch key, _ := tok.(string); key {
		case "queries":
			in.Queries, err = h.decodeQueries(dec)
		case "topk":
			err = dec.Decode(&in.TopK)
		case "return_scores":
			err = dec.Decode(&in.ReturnScores)
		default:
			var skip json.RawMessage
			err = dec.Decode(&skip)
		}
		if err != nil {
			return in, err
		}
	}
	if err := expectDelim(dec, '}', "body"); err != nil {
		return in, err
	}
	if _, err := dec.Token(); err != io.EOF {
		if err == nil {
			return in, refuse(http.StatusBadRequest, "body holds more than one JSON value")
		}
		return in, err
	}
	if in.Queries == nil {
		return in, refuse(http.StatusBadRequest, `"queries" is required: a list of strings`)
	}
	return in, nil
}

// decodeQueries reads the "queries" list, checking each query's length and their
// count as it goes. A null list is returned as nil.
func (h *handler) decodeQueries(dec *json.Decoder) ([]string, error) {
	tok, err := dec.Token()
	if err != nil || tok == nil {
		return nil, err
	}
	if d, ok := tok.(json.Delim); !ok || d != '[' {
		return nil, refuse(http.StatusBadRequest, `"queries" is %s, want a list of strings`, kind(tok))
	}
	queries := []string{}
	for dec.More() {
		if len(queries) == h.cfg.MaxQueries {
			return nil, refuse(http.StatusBadRequest, "more than %d queries, at most %d per request (--max-queries)",
				h.cfg.MaxQueries, h.cfg.MaxQueries)
		}
		var q string
		if err := dec.Decode(&q); err != nil {
			return nil, err
		}
		if len(q) > h.cfg.MaxQueryBytes {
			return nil, refuse(http.StatusBadRequest, "query %d is %d bytes, at most %d (--max-query-bytes)",
				len(queries), len(q), h.cfg.MaxQueryBytes)
		}
		queries = append(queries, q)
	}
	return queries, expectDelim(dec, ']', `"queries"`)
}

func expectDelim(dec *json.Decoder, want json.Delim, what string) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if d, ok := tok.(json.Delim); !ok || d != want {
		return refuse(http.StatusBadRequest, "%s is %s, want %s", what, kind(tok), kind(want))
	}
	return nil
}

// kind names what a JSON token is, without echoing a value that may be huge.
func kind(tok json.Token) string {
	switch t := tok.(type) {
	case json.Delim:
		return map[json.Delim]string{'{': "an object", '[': "a list", '}': "the end of an object", ']': "the end of a list"}[t]
	case string:
		return "a string"
	case float64, json.Number:
		return "a number"
	case bool:
		return "a boolean"
	case nil:
		return "null"
	}
	return fmt.Sprintf("%T", tok)
}

// classify maps a decoding failure to the answer its client gets.
func (h *handler) classify(err error) *requestError {
	var refused *requestError
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &refused):
		return refused
	case errors.As(err, &tooBig):
		return refuse(http.StatusRequestEntityTooLarge, "body larger than %d bytes (--max-body-bytes)", h.cfg.MaxBodyBytes)
	case errors.Is(err, errLongString):
		return refuse(http.StatusBadRequest, "body holds a string of more than %d bytes, and a query is at most %d bytes (--max-query-bytes)",
			maxStringBytes(h.cfg.MaxQueryBytes), h.cfg.MaxQueryBytes)
	case errors.Is(err, os.ErrDeadlineExceeded):
		return refuse(http.StatusRequestTimeout, "body not received within %gs (--read-timeout)", h.cfg.ReadTimeoutS)
	case errors.Is(err, httpserve.ErrBusy):
		return h.busy()
	}
	return refuse(http.StatusBadRequest,
		`body is not a retrieval request (%v); want {"queries": ["…"], "topk": 3, "return_scores": true}`, err)
}

// busy is the refusal of a request that finds every slot taken, or the bodies' budget
// spent.
func (h *handler) busy() *requestError {
	return refuse(http.StatusServiceUnavailable,
		"%d requests in flight, at most %d (--max-inflight); retry later", h.cfg.MaxInflight, h.cfg.MaxInflight)
}

func (h *handler) fail(w http.ResponseWriter, e *requestError) {
	h.log.Debug("rejected request", "status", e.status, "error", e.msg)
	if e.status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	writeJSON(w, e.status, map[string]string{"error": e.msg, "detail": e.msg})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v) // the status is sent; a write error here means the client left
}
