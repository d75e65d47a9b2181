package search

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// fixed is a Retriever that answers every query with the same hits, truncated to topk.
type fixed struct {
	hits  []Hit
	err   error
	topks []int
}

func (f *fixed) Retrieve(_ context.Context, queries []string, topk int) ([][]Hit, error) {
	f.topks = append(f.topks, topk)
	if f.err != nil {
		return nil, f.err
	}
	out := make([][]Hit, len(queries))
	for i := range out {
		out[i] = f.hits[:min(topk, len(f.hits))]
	}
	return out, nil
}

func post(t *testing.T, h http.Handler, body string) (int, string) {
	t.Helper()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/retrieve", strings.NewReader(body)))
	return w.Code, w.Body.String()
}

var fiveHits = []Hit{
	{ID: "1", Contents: "\"A\"\na", Score: 5},
	{ID: "2", Contents: "\"B\"\nb", Score: 4},
	{ID: "3", Contents: "\"C\"\nc", Score: 3},
	{ID: "4", Contents: "\"D\"\nd", Score: 2},
	{ID: "5", Contents: "\"E\"\ne", Score: 1},
}

func TestHandlerAnswerShapes(t *testing.T) {
	h := NewHandler(&fixed{hits: fiveHits}, ServerConfig{}, nil)
	tests := []struct {
		name string
		body string
		want string
	}{
		{
			name: "scores",
			body: `{"queries": ["q"], "topk": 2, "return_scores": true}`,
			want: `{"result":[[{"document":{"id":"1","contents":"\"A\"\na"},"score":5},{"document":{"id":"2","contents":"\"B\"\nb"},"score":4}]]}`,
		},
		{
			// Search-R1's server default: bare documents.
			name: "no scores",
			body: `{"queries": ["q", "r"], "topk": 1}`,
			want: `{"result":[[{"id":"1","contents":"\"A\"\na"}],[{"id":"1","contents":"\"A\"\na"}]]}`,
		},
		{
			name: "topk absent means the default of 3",
			body: `{"queries": ["q"]}`,
			want: `{"result":[[{"id":"1","contents":"\"A\"\na"},{"id":"2","contents":"\"B\"\nb"},{"id":"3","contents":"\"C\"\nc"}]]}`,
		},
		{
			name: "no queries",
			body: `{"queries": [], "topk": 3}`,
			want: `{"result":[]}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, got := post(t, h, tt.body)
			if code != http.StatusOK {
				t.Fatalf("POST %s: status %d (%s), want 200", tt.body, code, got)
			}
			if strings.TrimSpace(got) != tt.want {
				t.Errorf("POST %s =\n%s\nwant\n%s", tt.body, got, tt.want)
			}
		})
	}
}

func TestHandlerValidates(t *testing.T) {
	cfg := ServerConfig{MaxTopK: 10, MaxQueries: 2, MaxBodyBytes: 200}
	tests := []struct {
		name   string
		body   string
		status int
		detail string
	}{
		{"not JSON", `queries=q`, 400, "not a retrieval request"},
		{"queries missing", `{"topk": 3}`, 400, `"queries" is required`},
		{"queries not strings", `{"queries": [1, 2]}`, 400, "not a retrieval request"},
		{"negative topk", `{"queries": ["q"], "topk": -1}`, 400, "topk -1, want 1..10"},
		{"topk too large", `{"queries": ["q"], "topk": 11}`, 400, "topk 11, want 1..10"},
		{"too many queries", `{"queries": ["a", "b", "c"]}`, 400, "3 queries, at most 2 per request"},
		{"two JSON values", `{"queries": ["a"]} {}`, 400, "more than one JSON value"},
		{"body too large", `{"queries": ["` + strings.Repeat("x", 300) + `"]}`, 413, "larger than 200 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &fixed{hits: fiveHits}
			code, body := post(t, NewHandler(r, cfg, nil), tt.body)
			var got struct{ Detail string }
			if err := json.Unmarshal([]byte(body), &got); err != nil {
				t.Fatalf("error body %q is not JSON: %v", body, err)
			}
			if code != tt.status || !strings.Contains(got.Detail, tt.detail) {
				t.Errorf("POST %s = %d %q, want %d with detail containing %q", tt.body, code, got.Detail, tt.status, tt.detail)
			}
			if len(r.topks) != 0 {
				t.Errorf("retriever called for an invalid request")
			}
		})
	}
}

func TestHandlerRetrieverErrors(t *testing.T) {
	tests := []struct {
		err    error
		status int
	}{
		{errors.New("disk gone"), 500},
		{ErrBadRequest, 400},
	}
	for _, tt := range tests {
		code, body := post(t, NewHandler(&fixed{err: tt.err}, ServerConfig{}, nil), `{"queries": ["q"]}`)
		if code != tt.status || !strings.Contains(body, tt.err.Error()) {
			t.Errorf("retriever error %v: POST = %d %s, want %d naming the error", tt.err, code, body, tt.status)
		}
	}
}

func TestHandlerRoutes(t *testing.T) {
	h := NewHandler(&fixed{hits: fiveHits}, ServerConfig{}, nil)
	tests := []struct {
		method, path string
		status       int
	}{
		{http.MethodGet, "/retrieve", http.StatusMethodNotAllowed},
		{http.MethodGet, "/health", http.StatusOK},
		{http.MethodPost, "/search", http.StatusNotFound},
	}
	for _, tt := range tests {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(tt.method, tt.path, nil))
		if w.Code != tt.status {
			t.Errorf("%s %s = %d, want %d", tt.method, tt.path, w.Code, tt.status)
		}
	}
}

// blocking holds each request until released, to observe graceful shutdown.
type blocking struct {
	entered chan struct{}
	release chan struct{}
}

func (b *blocking) Retrieve(_ context.Context, queries []string, topk int) ([][]Hit, error) {
	b.entered <- struct{}{}
	<-b.release
	return (&fixed{hits: fiveHits}).Retrieve(context.Background(), queries, topk)
}

func TestServeShutsDownGracefully(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String()
	r := &blocking{entered: make(chan struct{}), release: make(chan struct{})}
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- Serve(ctx, ln, NewHandler(r, ServerConfig{}, nil), nil) }()

	type answer struct {
		code int
		body string
		err  error
	}
	inflight := make(chan answer, 1)
	go func() {
		resp, err := http.Post(url+"/retrieve", "application/json", strings.NewReader(`{"queries": ["q"], "topk": 1}`))
		if err != nil {
			inflight <- answer{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		inflight <- answer{resp.StatusCode, string(b), err}
	}()
	<-r.entered // the request is being served
	stop()
	// Shutdown closes the listener first; once dialing fails it is under way while
	// the request is still held.
	for {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			break
		}
		c.Close()
	}
	select {
	case err := <-served:
		t.Fatalf("Serve returned %v while a request was in flight", err)
	default:
	}
	close(r.release)
	got := <-inflight
	if got.err != nil || got.code != http.StatusOK || !strings.Contains(got.body, `"id":"1"`) {
		t.Errorf("in-flight request during shutdown = %d %q %v, want a complete 200 answer", got.code, got.body, got.err)
	}
	if err := <-served; err != nil {
		t.Errorf("Serve = %v, want nil after a graceful shutdown", err)
	}
	if _, err := http.Post(url+"/retrieve", "application/json", strings.NewReader(`{"queries": ["q"]}`)); err == nil {
		t.Error("server still answers after shutdown")
	}
}

func TestServeReportsListenerFailure(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
	err = Serve(context.Background(), ln, http.NotFoundHandler(), nil)
	if err == nil || !strings.Contains(err.Error(), ln.Addr().String()) {
		t.Errorf("Serve on a closed listener = %v, want an error naming %s", err, ln.Addr())
	}
}

func TestHandlerServesLocalIndex(t *testing.T) {
	l := openIndex(t, buildIndex(t, world))
	code, body := post(t, NewHandler(l, ServerConfig{}, nil), `{"queries": ["copper mines"], "topk": 3, "return_scores": true}`)
	if code != http.StatusOK {
		t.Fatalf("status %d: %s", code, body)
	}
	var got struct {
		Result [][]apiScored `json:"result"`
	}
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatal(err)
	}
	want := apiDoc{ID: "d3", Contents: JoinContents("Tessaly", world[2].Text)}
	if len(got.Result) != 1 || len(got.Result[0]) != 1 || !cmp.Equal(got.Result[0][0].Document, want) || got.Result[0][0].Score <= 0 {
		t.Errorf("answer = %+v, want one list holding %+v with a positive score", got.Result, want)
	}
}
