package search

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// ServerConfig configures the retrieval server (`mempo serve-retriever`).
type ServerConfig struct {
	// DefaultTopK answers requests without "topk" (or with 0); 0 means 3, the
	// top-k of DESIGN.md §6.
	DefaultTopK int `json:"default_topk"`
	// MaxTopK is the largest topk accepted; 0 means 100.
	MaxTopK int `json:"max_topk"`
	// MaxQueries is the most queries accepted in one request; 0 means 4096.
	MaxQueries int `json:"max_queries"`
	// MaxBodyBytes bounds a request body; 0 means 16 MiB.
	MaxBodyBytes int64 `json:"max_body_bytes"`
}

func (c ServerConfig) withDefaults() ServerConfig {
	c.DefaultTopK = orDefault(c.DefaultTopK, 3)
	c.MaxTopK = orDefault(c.MaxTopK, 100)
	c.MaxQueries = orDefault(c.MaxQueries, 4096)
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = 16 << 20
	}
	return c
}

// shutdownGrace is how long in-flight requests may finish after a stop signal.
const shutdownGrace = 10 * time.Second

// NewHandler serves r under the Search-R1 retrieval API: POST /retrieve (see
// api.go) and GET /health. Bad requests get 400 with {"detail": "…"}, as the
// FastAPI server answers validation errors with a detail message.
func NewHandler(r Retriever, cfg ServerConfig, log *slog.Logger) http.Handler {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	h := &handler{r: r, cfg: cfg.withDefaults(), log: log}
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
}

func (h *handler) retrieve(w http.ResponseWriter, req *http.Request) {
	body := http.MaxBytesReader(w, req.Body, h.cfg.MaxBodyBytes)
	dec := json.NewDecoder(body)
	var in apiRequest
	if err := dec.Decode(&in); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			h.fail(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("body larger than %d bytes", tooBig.Limit))
			return
		}
		h.fail(w, http.StatusBadRequest, fmt.Sprintf("body is not a retrieval request (%v); want {\"queries\": [\"…\"], \"topk\": 3, \"return_scores\": true}", err))
		return
	}
	if _, err := dec.Token(); err != io.EOF {
		h.fail(w, http.StatusBadRequest, "body holds more than one JSON value")
		return
	}
	if in.Queries == nil {
		h.fail(w, http.StatusBadRequest, `"queries" is required: a list of strings`)
		return
	}
	if len(in.Queries) > h.cfg.MaxQueries {
		h.fail(w, http.StatusBadRequest, fmt.Sprintf("%d queries, at most %d per request", len(in.Queries), h.cfg.MaxQueries))
		return
	}
	topk := h.cfg.DefaultTopK
	if in.TopK != nil && *in.TopK != 0 {
		topk = *in.TopK
	}
	if topk < 1 || topk > h.cfg.MaxTopK {
		h.fail(w, http.StatusBadRequest, fmt.Sprintf("topk %d, want 1..%d", topk, h.cfg.MaxTopK))
		return
	}
	hits, err := h.r.Retrieve(req.Context(), in.Queries, topk)
	if err != nil {
		if errors.Is(err, ErrBadRequest) {
			h.fail(w, http.StatusBadRequest, err.Error())
			return
		}
		if req.Context().Err() == nil {
			h.log.Error("retrieval failed", "queries", len(in.Queries), "err", err)
		}
		h.fail(w, http.StatusInternalServerError, err.Error())
		return
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
}

func (h *handler) fail(w http.ResponseWriter, status int, detail string) {
	h.log.Debug("rejected request", "status", status, "detail", detail)
	writeJSON(w, status, map[string]string{"detail": detail})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v) // the status is sent; a write error here means the client left
}

// Serve answers HTTP on ln with h until ctx is done, then stops accepting, lets
// in-flight requests finish for up to 10 s and returns nil. It returns an error
// only when serving itself fails.
func Serve(ctx context.Context, ln net.Listener, h http.Handler, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	log.Info("retrieval server listening", "addr", ln.Addr().String())
	select {
	case err := <-done:
		return fmt.Errorf("serve %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	log.Info("retrieval server shutting down", "addr", ln.Addr().String())
	sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		srv.Close()
		<-done
		return fmt.Errorf("serve %s: shutdown: %w", ln.Addr(), err)
	}
	<-done // http.ErrServerClosed
	return nil
}
