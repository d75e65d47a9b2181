package search

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"math"
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

// errorBody is the JSON body of a refused request.
type errorBody struct {
	Error  string `json:"error"`
	Detail string `json:"detail"`
}

// parseError decodes a refusal and checks that it carries its message under both keys.
func parseError(t *testing.T, body string) errorBody {
	t.Helper()
	var got errorBody
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatalf("error body %q is not JSON: %v", body, err)
	}
	if got.Error == "" || got.Detail != got.Error {
		t.Errorf("error body %q: want the message under \"error\" and \"detail\"", body)
	}
	return got
}

func TestHandlerValidates(t *testing.T) {
	cfg := ServerConfig{MaxTopK: 10, MaxQueries: 2, MaxQueryBytes: 8, MaxBodyBytes: 200}
	padded := `{"pad": [` + strings.Repeat("1,", 150) + `1], "queries": ["q"]}` // over the body limit, within the others
	tests := []struct {
		name    string
		body    string
		chunked bool // no Content-Length: the limit is found while reading
		status  int
		msg     string
	}{
		{name: "not JSON", body: `queries=q`, status: 400, msg: "not a retrieval request"},
		{name: "not an object", body: `["q"]`, status: 400, msg: "body is a list, want an object"},
		{name: "queries missing", body: `{"topk": 3}`, status: 400, msg: `"queries" is required`},
		{name: "queries null", body: `{"queries": null}`, status: 400, msg: `"queries" is required`},
		{name: "queries a string", body: `{"queries": "q"}`, status: 400, msg: `"queries" is a string, want a list of strings`},
		{name: "queries not strings", body: `{"queries": [1, 2]}`, status: 400, msg: "not a retrieval request"},
		{name: "negative topk", body: `{"queries": ["q"], "topk": -1}`, status: 400, msg: "topk -1, want 1..10 (--max-topk)"},
		{name: "topk too large", body: `{"queries": ["q"], "topk": 11}`, status: 400, msg: "topk 11, want 1..10 (--max-topk)"},
		{name: "huge topk", body: `{"queries": ["q"], "topk": 1000000000}`, status: 400, msg: "topk 1000000000, want 1..10 (--max-topk)"},
		{name: "topk overflows int", body: `{"queries": ["q"], "topk": 1e40}`, status: 400, msg: "not a retrieval request"},
		{name: "too many queries", body: `{"queries": ["a", "b", "c"]}`, status: 400, msg: "more than 2 queries, at most 2 per request (--max-queries)"},
		{name: "query too long", body: `{"queries": ["short", "123456789"]}`, status: 400, msg: "query 1 is 9 bytes, at most 8 (--max-query-bytes)"},
		{name: "query far too long", body: `{"queries": ["` + strings.Repeat("x", 60) + `"]}`, status: 400,
			msg: "body holds a string of more than 54 bytes, and a query is at most 8 bytes (--max-query-bytes)"},
		{name: "escaped query too long", body: `{"queries": ["` + strings.Repeat(`\u0041`, 9) + `"]}`, status: 400,
			msg: "query 0 is 9 bytes, at most 8 (--max-query-bytes)"},
		{name: "two JSON values", body: `{"queries": ["a"]} {}`, status: 400, msg: "more than one JSON value"},
		{name: "truncated", body: `{"queries": ["a"`, status: 400, msg: "not a retrieval request"},
		{name: "body too large", body: padded, status: 413, msg: "body of 330 bytes, larger than 200 bytes (--max-body-bytes)"},
		{name: "body too large, chunked", body: padded, chunked: true, status: 413, msg: "body larger than 200 bytes (--max-body-bytes)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &fixed{hits: fiveHits}
			req := httptest.NewRequest(http.MethodPost, "/retrieve", strings.NewReader(tt.body))
			if tt.chunked {
				req.ContentLength = -1
			}
			w := httptest.NewRecorder()
			NewHandler(r, cfg, nil).ServeHTTP(w, req)
			got := parseError(t, w.Body.String())
			if w.Code != tt.status || !strings.Contains(got.Error, tt.msg) {
				t.Errorf("POST %s = %d %q, want %d with an error containing %q", tt.body, w.Code, got.Error, tt.status, tt.msg)
			}
			if len(r.topks) != 0 {
				t.Errorf("retriever called for an invalid request")
			}
		})
	}
}

func TestHandlerSkipsUnknownKeys(t *testing.T) {
	r := &fixed{hits: fiveHits}
	code, body := post(t, NewHandler(r, ServerConfig{}, nil), `{"extra": {"a": [1, "b"]}, "queries": ["q"], "Topk": 9, "topk": 1}`)
	if code != http.StatusOK || !cmp.Equal(r.topks, []int{1}) {
		t.Errorf("POST with unknown keys = %d %s, topks %v; want 200 and topk 1", code, body, r.topks)
	}
}

// TestHandlerRefusesPastMaxInflight fills every slot with a held request: the next
// one gets 503 at once, /health still answers, and freed slots are taken again.
func TestHandlerRefusesPastMaxInflight(t *testing.T) {
	r := &blocking{entered: make(chan struct{}), release: make(chan struct{})}
	h := NewHandler(r, ServerConfig{MaxInflight: 2}, nil)
	held := make(chan int, 2)
	for range 2 {
		go func() {
			code, _ := post(t, h, `{"queries": ["q"]}`)
			held <- code
		}()
		<-r.entered
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/retrieve", strings.NewReader(`{"queries": ["q"]}`)))
	got := parseError(t, w.Body.String())
	if w.Code != http.StatusServiceUnavailable || !strings.Contains(got.Error, "at most 2 (--max-inflight)") || w.Header().Get("Retry-After") == "" {
		t.Errorf("third request = %d %q (Retry-After %q), want 503 naming --max-inflight with Retry-After",
			w.Code, got.Error, w.Header().Get("Retry-After"))
	}
	w = httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/health", nil))
	if w.Code != http.StatusOK {
		t.Errorf("GET /health with every slot taken = %d, want 200", w.Code)
	}
	close(r.release)
	for range 2 {
		if code := <-held; code != http.StatusOK {
			t.Errorf("held request = %d, want 200", code)
		}
	}
	go func() { <-r.entered }()
	if code, body := post(t, h, `{"queries": ["q"]}`); code != http.StatusOK {
		t.Errorf("request after the slots were freed = %d %s, want 200", code, body)
	}
}

// waiting answers only when its context ends.
type waiting struct{}

func (waiting) Retrieve(ctx context.Context, _ []string, _ int) ([][]Hit, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

func TestHandlerStopsRetrievalAtWriteTimeout(t *testing.T) {
	code, body := post(t, NewHandler(waiting{}, ServerConfig{WriteTimeoutS: 0.01}, nil), `{"queries": ["q", "r"]}`)
	got := parseError(t, body)
	if code != http.StatusServiceUnavailable || !strings.Contains(got.Error, "2 queries not answered within 0.01s (--write-timeout)") {
		t.Errorf("slow retrieval = %d %q, want 503 naming --write-timeout", code, got.Error)
	}
}

func TestServerConfigValidate(t *testing.T) {
	if err := DefaultServerConfig().Validate(); err != nil {
		t.Fatalf("DefaultServerConfig().Validate() = %v, want nil", err)
	}
	tests := []struct {
		name string
		set  func(*ServerConfig)
		want string
	}{
		{"zero topk", func(c *ServerConfig) { c.DefaultTopK = 0 }, "--topk 0: want at least 1"},
		{"topk over max", func(c *ServerConfig) { c.DefaultTopK = 101 }, "--topk 101, --max-topk 100"},
		{"zero max-topk", func(c *ServerConfig) { c.MaxTopK = 0 }, "--max-topk 0"},
		{"negative max-queries", func(c *ServerConfig) { c.MaxQueries = -1 }, "--max-queries -1"},
		{"zero max-query-bytes", func(c *ServerConfig) { c.MaxQueryBytes = 0 }, "--max-query-bytes 0"},
		{"negative max-body-bytes", func(c *ServerConfig) { c.MaxBodyBytes = -5 }, "--max-body-bytes -5"},
		{"zero max-inflight", func(c *ServerConfig) { c.MaxInflight = 0 }, "--max-inflight 0"},
		{"zero read-header-timeout", func(c *ServerConfig) { c.ReadHeaderTimeoutS = 0 }, "--read-header-timeout 0"},
		{"negative read-timeout", func(c *ServerConfig) { c.ReadTimeoutS = -1 }, "--read-timeout -1"},
		{"NaN write-timeout", func(c *ServerConfig) { c.WriteTimeoutS = math.NaN() }, "--write-timeout NaN"},
		{"sub-nanosecond idle-timeout", func(c *ServerConfig) { c.IdleTimeoutS = 1e-12 }, "--idle-timeout 1e-12"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultServerConfig()
			tt.set(&c)
			err := c.Validate()
			if !errors.Is(err, ErrConfig) || !strings.HasPrefix(err.Error(), tt.want) {
				t.Errorf("Validate() = %v, want an ErrConfig starting %q", err, tt.want)
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
	go func() { served <- Serve(ctx, ln, NewHandler(r, ServerConfig{}, nil), ServerConfig{}, nil) }()

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
	err = Serve(context.Background(), ln, http.NotFoundHandler(), ServerConfig{}, nil)
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
