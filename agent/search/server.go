package search

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"

	"github.com/mempo/mempo/internal/httpserve"
)

// ServerConfig configures the retrieval server (`mempo serve-retriever`). Each limit
// bounds what one client can make the server hold or spend: the body, the text of a
// query (BM25 analysis costs 200-300 bytes of heap per byte of query: a 1 MB query
// peaked at 192 MB, and a 15 MB one took the server from 0.6 to 4.7 GB), the queries
// and hits of a request, the requests served at once, and the time a connection may
// take. The bodies being read share a budget of MaxInflight×MaxBodyBytes bytes
// received, each byte costing at most about 3 while decoded, and a request takes one of
// the MaxInflight slots only once its body is read: clients that stall mid-body hold
// what they sent, never a slot.
//
// NewHandler and Serve take a zero field as its default (DefaultServerConfig);
// Validate checks a complete config, as the flags resolve one.
type ServerConfig struct {
	// DefaultTopK answers requests without "topk" (or with 0).
	DefaultTopK int `json:"default_topk"`
	// MaxTopK is the largest topk accepted.
	MaxTopK int `json:"max_topk"`
	// MaxQueries is the most queries accepted in one request.
	MaxQueries int `json:"max_queries"`
	// MaxQueryBytes is the longest query accepted, in bytes of UTF-8.
	MaxQueryBytes int `json:"max_query_bytes"`
	// MaxBodyBytes bounds a request body; a larger one gets 413.
	MaxBodyBytes int64 `json:"max_body_bytes"`
	// MaxInflight is the most /retrieve requests searched at once, counted from when
	// their body is read; one more gets 503 at once rather than a place in a queue.
	MaxInflight int `json:"max_inflight"`
	// ReadHeaderTimeoutS bounds reading a request's headers, in seconds.
	ReadHeaderTimeoutS float64 `json:"read_header_timeout_s"`
	// ReadTimeoutS bounds reading a whole request, headers and body, in seconds: a
	// client that stalls mid-body loses its connection then.
	ReadTimeoutS float64 `json:"read_timeout_s"`
	// WriteTimeoutS bounds the time from the end of the headers to the end of the
	// answer, retrieval included, in seconds; retrieval is canceled when it passes.
	WriteTimeoutS float64 `json:"write_timeout_s"`
	// IdleTimeoutS bounds how long a keep-alive connection waits for its next request,
	// in seconds.
	IdleTimeoutS float64 `json:"idle_timeout_s"`
}

// DefaultServerConfig returns the server's defaults. The top-k of 3 is DESIGN.md §6's.
// Search-R1 queries are a sentence or two; 8 KiB is ~2,000 tokens, more than a turn's
// response budget, and analyzes in about 2 ms. A client's attempt times out after 30 s by default (ClientConfig.TimeoutS), so
// a 2-minute write timeout only cuts off answers nobody waits for.
func DefaultServerConfig() ServerConfig {
	return ServerConfig{
		DefaultTopK:        3,
		MaxTopK:            100,
		MaxQueries:         4096,
		MaxQueryBytes:      8 << 10,
		MaxBodyBytes:       16 << 20,
		MaxInflight:        64,
		ReadHeaderTimeoutS: 10,
		ReadTimeoutS:       30,
		WriteTimeoutS:      120,
		IdleTimeoutS:       120,
	}
}

func (c ServerConfig) withDefaults() ServerConfig {
	d := DefaultServerConfig()
	c.DefaultTopK = orDefault(c.DefaultTopK, d.DefaultTopK)
	c.MaxTopK = orDefault(c.MaxTopK, d.MaxTopK)
	c.MaxQueries = orDefault(c.MaxQueries, d.MaxQueries)
	c.MaxQueryBytes = orDefault(c.MaxQueryBytes, d.MaxQueryBytes)
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = d.MaxBodyBytes
	}
	c.MaxInflight = orDefault(c.MaxInflight, d.MaxInflight)
	c.ReadHeaderTimeoutS = orDefault(c.ReadHeaderTimeoutS, d.ReadHeaderTimeoutS)
	c.ReadTimeoutS = orDefault(c.ReadTimeoutS, d.ReadTimeoutS)
	c.WriteTimeoutS = orDefault(c.WriteTimeoutS, d.WriteTimeoutS)
	c.IdleTimeoutS = orDefault(c.IdleTimeoutS, d.IdleTimeoutS)
	return c
}

// Validate names the first bad field by its flag: every limit must be at least 1,
// every timeout positive, and the default topk within max-topk.
func (c ServerConfig) Validate() error {
	for _, f := range []struct {
		flag string
		v    int64
	}{
		{"--topk", int64(c.DefaultTopK)},
		{"--max-topk", int64(c.MaxTopK)},
		{"--max-queries", int64(c.MaxQueries)},
		{"--max-query-bytes", int64(c.MaxQueryBytes)},
		{"--max-body-bytes", c.MaxBodyBytes},
		{"--max-inflight", int64(c.MaxInflight)},
	} {
		if f.v < 1 {
			return fmt.Errorf("%s %d: want at least 1: %w", f.flag, f.v, ErrConfig)
		}
	}
	if c.DefaultTopK > c.MaxTopK {
		return fmt.Errorf("--topk %d, --max-topk %d: want topk <= max-topk: %w", c.DefaultTopK, c.MaxTopK, ErrConfig)
	}
	if err := c.timeouts().Check(); err != nil {
		return fmt.Errorf("%w: %w", err, ErrConfig)
	}
	return nil
}

// timeouts are the connection timeouts of c.
func (c ServerConfig) timeouts() httpserve.Timeouts {
	return httpserve.Timeouts{ReadHeader: c.ReadHeaderTimeoutS, Read: c.ReadTimeoutS, Write: c.WriteTimeoutS, Idle: c.IdleTimeoutS}
}

// Serve answers HTTP on ln with h, under cfg's timeouts, until ctx is done, then
// stops accepting, lets in-flight requests finish for up to 10 s and returns nil. It
// returns an error only when serving itself fails. A client that stalls, in its
// headers or its body, loses its connection when the read timeout passes, and
// holds up no other client meanwhile.
func Serve(ctx context.Context, ln net.Listener, h http.Handler, cfg ServerConfig, log *slog.Logger) error {
	cfg = cfg.withDefaults()
	return httpserve.Serve(ctx, ln, h, cfg.timeouts(), "retrieval server", log)
}
