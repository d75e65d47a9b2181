package search

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/mempo/mempo/internal/wait"
)

// ClientConfig configures a Client of a Search-R1 retrieval server.
type ClientConfig struct {
	// URL of the server: "http://host:port" (POSTs go to /retrieve) or the full
	// endpoint URL, as Search-R1's retriever.url takes it.
	URL string `json:"url"`
	// TimeoutS bounds one attempt, in seconds; 0 means 30.
	TimeoutS float64 `json:"timeout_s"`
	// Attempts is how many times a request is tried in all; 0 means 3.
	Attempts int `json:"attempts"`
	// BackoffS is the wait before the second attempt, in seconds; it doubles after
	// each failure. 0 means 0.5.
	BackoffS float64 `json:"backoff_s"`
	// MaxBatch is the most queries sent in one request; larger batches are split.
	// 0 means 512.
	MaxBatch int `json:"max_batch"`
}

// Defaults for ClientConfig's zero fields.
const (
	DefaultTimeoutS = 30
	DefaultAttempts = 3
	DefaultBackoffS = 0.5
	DefaultMaxBatch = 512
)

// maxAnswer bounds a /retrieve answer: topk passages of ~1 KB for MaxBatch queries
// is a few MB; a larger body is not a retrieval answer.
const maxAnswer = 256 << 20

// Client is a Retriever backed by a Search-R1 retrieval server. Transport errors,
// 5xx and 429 answers are retried with exponential backoff up to the attempt budget;
// other 4xx answers and malformed answers fail at once. A Client is safe for
// concurrent use.
type Client struct {
	url      string
	http     *http.Client
	attempts int
	backoff  time.Duration
	maxBatch int
	// sleep waits between attempts; tests replace it to run without real waits.
	sleep func(ctx context.Context, d time.Duration) error
}

var _ Retriever = (*Client)(nil)

// NewClient checks cfg and returns a client. It does not contact the server.
func NewClient(cfg ClientConfig) (*Client, error) {
	endpoint, err := endpointURL(cfg.URL)
	if err != nil {
		return nil, err
	}
	if cfg.TimeoutS < 0 || cfg.Attempts < 0 || cfg.BackoffS < 0 || cfg.MaxBatch < 0 {
		return nil, fmt.Errorf("retriever %s: negative timeout_s, attempts, backoff_s or max_batch in %+v", endpoint, cfg)
	}
	timeout := orDefault(cfg.TimeoutS, DefaultTimeoutS)
	backoff := orDefault(cfg.BackoffS, DefaultBackoffS)
	return &Client{
		url:      endpoint,
		http:     &http.Client{Timeout: time.Duration(timeout * float64(time.Second))},
		attempts: orDefault(cfg.Attempts, DefaultAttempts),
		backoff:  time.Duration(backoff * float64(time.Second)),
		maxBatch: orDefault(cfg.MaxBatch, DefaultMaxBatch),
		sleep:    wait.Sleep,
	}, nil
}

func orDefault[T int | float64](v, def T) T {
	if v == 0 {
		return def
	}
	return v
}

// endpointURL accepts a base URL or the /retrieve endpoint itself.
func endpointURL(raw string) (string, error) {
	if raw == "" {
		return "", errors.New("retriever: no URL given (want e.g. http://127.0.0.1:8000/retrieve)")
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("retriever %q: want an http(s) URL such as http://127.0.0.1:8000/retrieve", raw)
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = "/retrieve"
	}
	return u.String(), nil
}

// URL is the endpoint the client posts to.
func (c *Client) URL() string { return c.url }

// Close releases idle connections.
func (c *Client) Close() error {
	c.http.CloseIdleConnections()
	return nil
}

// Retrieve sends the queries in requests of at most MaxBatch queries and returns
// the server's hits. A server that stays unreachable gives an error wrapping
// ErrUnreachable that names the URL and the attempts made.
func (c *Client) Retrieve(ctx context.Context, queries []string, topk int) ([][]Hit, error) {
	if topk < 1 {
		return nil, fmt.Errorf("retriever %s: topk %d, want at least 1: %w", c.url, topk, ErrBadRequest)
	}
	out := make([][]Hit, 0, len(queries))
	for start := 0; start < len(queries); start += c.maxBatch {
		batch := queries[start:min(start+c.maxBatch, len(queries))]
		hits, err := c.retrieveBatch(ctx, batch, topk)
		if err != nil {
			return nil, err
		}
		out = append(out, hits...)
	}
	return out, nil
}

func (c *Client) retrieveBatch(ctx context.Context, queries []string, topk int) ([][]Hit, error) {
	body, err := json.Marshal(apiRequest{Queries: queries, TopK: &topk, ReturnScores: true})
	if err != nil {
		return nil, fmt.Errorf("retriever %s: %w", c.url, err)
	}
	wait := c.backoff
	for attempt := 1; ; attempt++ {
		hits, retry, err := c.post(ctx, body, len(queries))
		if err == nil {
			return hits, nil
		}
		if cerr := ctx.Err(); cerr != nil {
			return nil, fmt.Errorf("retriever %s: attempt %d: %w", c.url, attempt, cerr)
		}
		if !retry {
			return nil, fmt.Errorf("retriever %s: %w", c.url, err)
		}
		if attempt >= c.attempts {
			return nil, fmt.Errorf("retriever %s: %w after %d attempts: %w", c.url, ErrUnreachable, attempt, err)
		}
		if serr := c.sleep(ctx, wait); serr != nil {
			return nil, fmt.Errorf("retriever %s: waiting to retry after %w: %w", c.url, err, serr)
		}
		wait *= 2
	}
}

// post makes one attempt. retry reports whether a failure is worth another try.
func (c *Client) post(ctx context.Context, body []byte, n int) (hits [][]Hit, retry bool, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(body))
	if err != nil {
		return nil, false, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the URL is already in the message
		}
		return nil, true, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer+1))
	if err != nil {
		return nil, true, fmt.Errorf("reading answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		err := fmt.Errorf("status %s: %s", resp.Status, strings.TrimSpace(snippet(b)))
		if resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests {
			return nil, true, err
		}
		return nil, false, fmt.Errorf("%w: %w", err, ErrBadRequest)
	}
	if len(b) > maxAnswer {
		return nil, false, fmt.Errorf("answer larger than %d bytes: %w", maxAnswer, ErrProtocol)
	}
	hits, err = decodeResult(b, n)
	if err != nil {
		return nil, false, fmt.Errorf("%w: %w", err, ErrProtocol)
	}
	return hits, false, nil
}
