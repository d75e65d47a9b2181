package search

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// startServer serves h on a loopback listener with Serve, the code path of
// `mempo serve-retriever`, and stops it when the test ends.
func startServer(t *testing.T, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, ln, h, ServerConfig{}, nil) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve = %v, want nil after shutdown", err)
		}
	})
	return "http://" + ln.Addr().String()
}

// sleeps records the waits a client asked for instead of waiting.
type sleeps struct{ got []time.Duration }

func (s *sleeps) sleep(ctx context.Context, d time.Duration) error {
	s.got = append(s.got, d)
	return ctx.Err()
}

func newTestClient(t *testing.T, cfg ClientConfig) (*Client, *sleeps) {
	t.Helper()
	c, err := NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s := &sleeps{}
	c.sleep = s.sleep
	t.Cleanup(func() { c.Close() })
	return c, s
}

// flaky answers 503 to the first fails requests, then delegates to h.
type flaky struct {
	h     http.Handler
	fails int32
	calls atomic.Int32
}

func (f *flaky) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if f.calls.Add(1) <= f.fails {
		http.Error(w, "warming up", http.StatusServiceUnavailable)
		return
	}
	f.h.ServeHTTP(w, r)
}

var testQueries = []string{"Where was Ilda Brenn born?", "founder of Dremmel", "copper mines", "nothing here zzz", "river"}

func TestClientMatchesLocalOverHTTP(t *testing.T) {
	l := openIndex(t, buildIndex(t, world))
	want, err := l.Retrieve(context.Background(), testQueries, 3)
	if err != nil {
		t.Fatal(err)
	}
	counter := &flaky{h: NewHandler(l, ServerConfig{}, nil)}
	base := startServer(t, counter)
	for _, tt := range []struct {
		name     string
		url      string
		maxBatch int
		requests int32
	}{
		{"base URL, one request", base, 0, 1},
		{"endpoint URL, split in batches of 2", base + "/retrieve", 2, 3},
	} {
		t.Run(tt.name, func(t *testing.T) {
			counter.calls.Store(0)
			c, _ := newTestClient(t, ClientConfig{URL: tt.url, MaxBatch: tt.maxBatch})
			got, err := c.Retrieve(context.Background(), testQueries, 3)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("hits over HTTP differ from the local index (-want +got):\n%s", diff)
			}
			if n := counter.calls.Load(); n != tt.requests {
				t.Errorf("server saw %d requests, want %d", n, tt.requests)
			}
		})
	}
}

func TestClientServerDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String() + "/retrieve"
	ln.Close() // nothing listens there now
	c, s := newTestClient(t, ClientConfig{URL: url, BackoffS: 0.25})
	_, err = c.Retrieve(context.Background(), []string{"q"}, 3)
	if err == nil {
		t.Fatal("Retrieve against a closed port succeeded")
	}
	if !errors.Is(err, ErrUnreachable) {
		t.Errorf("errors.Is(%v, ErrUnreachable) = false, want true", err)
	}
	if want := "retriever " + url + ": unreachable after 3 attempts: "; !strings.HasPrefix(err.Error(), want) {
		t.Errorf("error = %q, want prefix %q", err, want)
	}
	if want := []time.Duration{250 * time.Millisecond, 500 * time.Millisecond}; !cmp.Equal(s.got, want) {
		t.Errorf("backoff waits = %v, want %v", s.got, want)
	}
}

func TestClientRetries5xx(t *testing.T) {
	l := openIndex(t, buildIndex(t, world))
	want, err := l.Retrieve(context.Background(), testQueries, 2)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		fails     int32
		wantErr   string
		wantCalls int32
		wantWaits int
	}{
		{"succeeds at once", 0, "", 1, 0},
		{"503 twice then success", 2, "", 3, 2},
		{"503 throughout", 5, "unreachable after 3 attempts: status 503 Service Unavailable: warming up", 3, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &flaky{h: NewHandler(l, ServerConfig{}, nil), fails: tt.fails}
			c, s := newTestClient(t, ClientConfig{URL: startServer(t, f)})
			got, err := c.Retrieve(context.Background(), testQueries, 2)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.Is(err, ErrUnreachable) {
					t.Errorf("Retrieve error = %v, want ErrUnreachable containing %q", err, tt.wantErr)
				}
			} else {
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("hits (-want +got):\n%s", diff)
				}
			}
			if n := f.calls.Load(); n != tt.wantCalls {
				t.Errorf("server saw %d requests, want %d", n, tt.wantCalls)
			}
			if len(s.got) != tt.wantWaits {
				t.Errorf("client waited %d times, want %d", len(s.got), tt.wantWaits)
			}
		})
	}
}

func TestClientDoesNotRetryPermanentErrors(t *testing.T) {
	l := openIndex(t, buildIndex(t, world))
	tests := []struct {
		name    string
		handler http.Handler
		want    error
		detail  string
	}{
		{
			name:    "request refused",
			handler: NewHandler(l, ServerConfig{MaxQueries: 1}, nil),
			want:    ErrBadRequest,
			detail:  "at most 1 per request",
		},
		{
			name: "answer not JSON",
			handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Write([]byte("<html>proxy</html>"))
			}),
			want:   ErrProtocol,
			detail: "answer is not JSON",
		},
		{
			name: "answer for the wrong number of queries",
			handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Write([]byte(`{"result": [[]]}`))
			}),
			want:   ErrProtocol,
			detail: "1 result lists for 2 queries",
		},
		{
			name: "document without contents",
			handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Write([]byte(`{"result": [[], [{"document": {"id": "1"}, "score": 1}]]}`))
			}),
			want:   ErrProtocol,
			detail: `result 1, document 0: document has no "contents"`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &flaky{h: tt.handler}
			c, s := newTestClient(t, ClientConfig{URL: startServer(t, f)})
			_, err := c.Retrieve(context.Background(), []string{"a", "b"}, 3)
			if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.detail) {
				t.Errorf("Retrieve error = %v, want %v containing %q", err, tt.want, tt.detail)
			}
			if n := f.calls.Load(); n != 1 || len(s.got) != 0 {
				t.Errorf("requests %d, waits %d; want 1, 0 (no retry)", n, len(s.got))
			}
		})
	}
}

func TestClientReadsOtherServerShapes(t *testing.T) {
	// return_scores false gives bare documents; Search-R1's BM25 server sends
	// title/text/contents without id; ids may be numbers.
	body := `{"result": [[{"id": 7, "contents": "\"A\"\nalpha"}], [{"document": {"title": "B", "text": "beta", "contents": "\"B\"\nbeta"}, "score": 2.5}], [{"document": {"id": "c", "title": "C", "text": "gamma"}}]]}`
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(body)) })
	c, _ := newTestClient(t, ClientConfig{URL: startServer(t, h)})
	got, err := c.Retrieve(context.Background(), []string{"a", "b", "c"}, 1)
	if err != nil {
		t.Fatal(err)
	}
	want := [][]Hit{
		{{ID: "7", Title: "A", Text: "alpha", Contents: "\"A\"\nalpha"}},
		{{Title: "B", Text: "beta", Contents: "\"B\"\nbeta", Score: 2.5}},
		{{ID: "c", Title: "C", Text: "gamma", Contents: "\"C\"\ngamma"}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("hits (-want +got):\n%s", diff)
	}
}

func TestClientStopsWhenContextEnds(t *testing.T) {
	f := &flaky{h: http.NotFoundHandler(), fails: 10}
	c, err := NewClient(ClientConfig{URL: startServer(t, f)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c.sleep = func(ctx context.Context, d time.Duration) error {
		cancel() // the caller gives up during the first backoff
		return ctx.Err()
	}
	_, err = c.Retrieve(ctx, []string{"q"}, 3)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Retrieve error = %v, want context.Canceled", err)
	}
	if n := f.calls.Load(); n != 1 {
		t.Errorf("server saw %d requests, want 1", n)
	}
}

func TestNewClientRejectsBadConfig(t *testing.T) {
	tests := []struct {
		cfg  ClientConfig
		want string
	}{
		{ClientConfig{}, "no URL given"},
		{ClientConfig{URL: "127.0.0.1:8000"}, "want an http(s) URL"},
		{ClientConfig{URL: "ftp://host/retrieve"}, "want an http(s) URL"},
		{ClientConfig{URL: "http://host", Attempts: -1}, "negative"},
	}
	for _, tt := range tests {
		_, err := NewClient(tt.cfg)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("NewClient(%+v) error = %v, want one containing %q", tt.cfg, err, tt.want)
		}
	}
	c, err := NewClient(ClientConfig{URL: "http://127.0.0.1:8000"})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := c.URL(), "http://127.0.0.1:8000/retrieve"; got != want {
		t.Errorf("URL() = %q, want %q", got, want)
	}
	if _, err := c.Retrieve(context.Background(), []string{"q"}, 0); !errors.Is(err, ErrBadRequest) {
		t.Errorf("Retrieve(topk 0) error = %v, want ErrBadRequest", err)
	}
}
