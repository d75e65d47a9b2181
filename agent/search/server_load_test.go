package search

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mempo/mempo/internal/httpserve"
)

// serveOn serves h with Serve under cfg on a loopback listener until the test ends.
func serveOn(t *testing.T, h http.Handler, cfg ServerConfig) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, ln, h, cfg, nil) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve = %v, want nil after shutdown", err)
		}
	})
	return ln.Addr().String()
}

// stall sends partial, the start of a request, on a raw connection and then nothing
// more. It returns what the server wrote back and how long after the last byte sent
// the server closed the connection, or an error if it was still open after wait.
func stall(addr, partial string, wait time.Duration) (reply string, after time.Duration, err error) {
	c, err := net.DialTimeout("tcp", addr, wait)
	if err != nil {
		return "", 0, err
	}
	defer c.Close()
	if _, err := io.WriteString(c, partial); err != nil {
		return "", 0, fmt.Errorf("send: %w", err)
	}
	sent := time.Now()
	c.SetReadDeadline(sent.Add(wait))
	b, err := io.ReadAll(c)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return string(b), time.Since(sent), fmt.Errorf("connection still open %v after the last byte", wait)
	}
	// EOF or a reset: the server closed it.
	return string(b), time.Since(sent), nil
}

const (
	stalledBodyRequest    = "POST /retrieve HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"queries\": [\"cop"
	stalledHeadersRequest = "POST /retrieve HTTP/1.1\r\nHost: test\r\nContent-Le"
)

func TestServeCutsOffStalledClients(t *testing.T) {
	cfg := ServerConfig{ReadHeaderTimeoutS: 0.5, ReadTimeoutS: 0.5}
	addr := serveOn(t, NewHandler(&fixed{hits: fiveHits}, cfg, nil), cfg)
	type stalled struct {
		reply string
		after time.Duration
		err   error
		done  time.Time
	}
	start := func(partial string) chan stalled {
		ch := make(chan stalled, 1)
		go func() {
			reply, after, err := stall(addr, partial, 5*time.Second)
			ch <- stalled{reply, after, err, time.Now()}
		}()
		return ch
	}
	body, headers := start(stalledBodyRequest), start(stalledHeadersRequest)

	// Another client is served while both stall.
	resp, err := http.Post("http://"+addr+"/retrieve", "application/json", strings.NewReader(`{"queries": ["q"]}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	served := time.Now()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("request beside stalled clients = %d, want 200", resp.StatusCode)
	}

	for _, tt := range []struct {
		name  string
		ch    chan stalled
		reply string
	}{
		{"stalled body", body, "HTTP/1.1 408"},
		{"stalled headers", headers, ""},
	} {
		got := <-tt.ch
		switch {
		case got.err != nil:
			t.Errorf("%s: %v", tt.name, got.err)
		case got.after > 2500*time.Millisecond:
			t.Errorf("%s: closed %v after the last byte, want about the 0.5s read timeout", tt.name, got.after)
		case !strings.HasPrefix(got.reply, tt.reply):
			t.Errorf("%s: server wrote %q, want %q", tt.name, got.reply, tt.reply)
		case got.done.Before(served):
			t.Errorf("%s: closed before the other client was served", tt.name)
		}
		if tt.reply != "" && !strings.Contains(got.reply, "(--read-timeout)") {
			t.Errorf("%s: answer %q does not name --read-timeout", tt.name, got.reply)
		}
	}
}

// TestStalledClientsHoldNoSlot: clients that send the headers and half of a /retrieve
// body, then stall, more of them than there are slots, do not make well-formed
// requests answer 503 while they hold their connections.
func TestStalledClientsHoldNoSlot(t *testing.T) {
	cfg := ServerConfig{MaxInflight: 2, ReadTimeoutS: 120}
	h := NewHandler(&fixed{hits: fiveHits}, cfg, nil)
	var read atomic.Int64 // body bytes the handler has read, all requests together
	addr := serveOn(t, http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		req.Body = countedBody{req.Body, &read}
		h.ServeHTTP(w, req)
	}), cfg)
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range 2 * cfg.MaxInflight {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		if _, err := io.WriteString(c, stalledBodyRequest); err != nil {
			t.Fatal(err)
		}
	}
	// Once as many stalled bodies as there are slots are read, a server that takes a
	// slot before it reads the body's end holds every slot.
	_, partial, _ := strings.Cut(stalledBodyRequest, "\r\n\r\n")
	waitFor(t, "stalled bodies read", func() bool { return read.Load() >= int64(cfg.MaxInflight*len(partial)) })
	for i := range 3 {
		resp, err := http.Post("http://"+addr+"/retrieve", "application/json", strings.NewReader(`{"queries": ["q"]}`))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("request %d beside %d stalled bodies = %d %s, want 200", i, len(conns), resp.StatusCode, b)
		}
	}
}

// countedBody adds the bytes read from a request body to n.
type countedBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b countedBody) Read(p []byte) (int, error) {
	k, err := b.ReadCloser.Read(p)
	b.n.Add(int64(k))
	return k, err
}

// waitFor waits until cond holds, failing the test if it does not within a minute.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !cond(); runtime.Gosched() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within a minute", what)
		}
	}
}

// TestEarlyRefusalReadByWholeBodyClients: a client that writes its whole body before
// it reads (as Python's http.client does) reads the 400 the server answered early —
// a 15 MB body whose first query is over the query limit — rather than a broken pipe.
func TestEarlyRefusalReadByWholeBodyClients(t *testing.T) {
	cfg := ServerConfig{}
	addr := serveOn(t, NewHandler(&fixed{hits: fiveHits}, cfg, nil), cfg)
	var body bytes.Buffer
	body.WriteString(`{"queries": ["` + strings.Repeat("a", 60<<10) + `"`)
	for body.Len() < 15<<20 {
		body.WriteString(`, "` + strings.Repeat("b", 1000) + `"`)
	}
	body.WriteString("]}")
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Minute))
	head := fmt.Sprintf("POST /retrieve HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", body.Len())
	if _, err := io.WriteString(c, head); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(body.Bytes()); err != nil {
		t.Fatalf("writing the whole body: %v (the server closed before the client could read its answer)", err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(msg), "--max-query-bytes") {
		t.Errorf("answer %d %.200q, want a 400 naming --max-query-bytes", resp.StatusCode, msg)
	}
}

// heapWatch samples the heap's object bytes every millisecond, without stopping the
// world, to catch a peak that a before/after reading would miss.
type heapWatch struct {
	base, peak atomic.Uint64
	stop       chan struct{}
	done       chan struct{}
}

func watchHeap() *heapWatch {
	runtime.GC()
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	w := &heapWatch{stop: make(chan struct{}), done: make(chan struct{})}
	w.base.Store(s[0].Value.Uint64())
	go func() {
		defer close(w.done)
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-w.stop:
				return
			case <-tick.C:
			}
			metrics.Read(s)
			if v := s[0].Value.Uint64(); v > w.peak.Load() {
				w.peak.Store(v)
			}
		}
	}()
	return w
}

// growth stops the watch and returns the peak over the starting level.
func (w *heapWatch) growth() uint64 {
	close(w.stop)
	<-w.done
	return max(w.peak.Load(), w.base.Load()) - w.base.Load()
}

// TestServeUnderLoad runs hundreds of loopback clients at once against a local index:
// well-formed requests mixed with oversized bodies, a ~15 MB query (which BM25 analysis
// would blow up to gigabytes of heap), a huge topk, too many queries, and clients that
// stall mid-body or mid-headers. Well-formed requests get an answer or a clean 503,
// most get an answer; the others get their 413 or 400 naming the limit's flag; stalled
// connections are closed at the read timeout; and the heap stays within a bound that
// one 15 MB query analyzed would exceed several times.
func TestServeUnderLoad(t *testing.T) {
	const (
		goodClients    = 200
		goodPerClient  = 4
		stalledBodies  = 10
		stalledHeaders = 5
		maxHeapGrowth  = 768 << 20
	)
	cfg := ServerConfig{MaxTopK: 10, MaxQueries: 16, MaxQueryBytes: 1 << 10, MaxBodyBytes: 16 << 20, MaxInflight: 64,
		WriteTimeoutS: 10, IdleTimeoutS: 10}

	// The bodies exist before the heap's starting level is taken.
	var hugeQuery strings.Builder
	for i := 0; hugeQuery.Len() < 15<<20; i++ {
		fmt.Fprintf(&hugeQuery, "w%d ", i) // distinct terms, as many as fit
	}
	tooMany := make([]string, cfg.MaxQueries+1)
	for i := range tooMany {
		tooMany[i] = "copper"
	}
	mustJSON := func(v any) []byte {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	// Over the body limit in short strings, which no other limit catches first.
	bigBody := []byte(`{"pad": [` + strings.Repeat(`"0123456789",`, 17<<20/13) + `0], "queries": ["copper"]}`)
	bad := []struct {
		name    string
		body    []byte
		chunked bool
		status  int
		flag    string
		clients int
	}{
		{"body over the limit", bigBody, false, http.StatusRequestEntityTooLarge, "--max-body-bytes", 3},
		{"chunked body over the limit", bigBody, true, http.StatusRequestEntityTooLarge, "--max-body-bytes", 2},
		{"15 MB query", mustJSON(map[string]any{"queries": []string{"copper", hugeQuery.String()}}), false, http.StatusBadRequest, "--max-query-bytes", 3},
		{"huge topk", []byte(`{"queries": ["copper"], "topk": 1000000000}`), false, http.StatusBadRequest, "--max-topk", 5},
		{"too many queries", mustJSON(map[string]any{"queries": tooMany}), false, http.StatusBadRequest, "--max-queries", 5},
	}
	hugeQuery.Reset()
	// The read timeout lets the largest body through on this machine (the race
	// detector slows decoding tenfold) and still cuts stalled clients off soon.
	decodeStart := time.Now()
	if _, err := (&handler{cfg: cfg.withDefaults()}).decodeRequest(bytes.NewReader(bigBody)); err != nil {
		t.Fatal(err)
	}
	readTimeoutS := max(1.5, 4*time.Since(decodeStart).Seconds())
	cfg.ReadHeaderTimeoutS, cfg.ReadTimeoutS = readTimeoutS, readTimeoutS
	addr := serveOn(t, NewHandler(openIndex(t, buildIndex(t, world)), cfg, nil), cfg)
	url := "http://" + addr + "/retrieve"
	goodBodies := [][]byte{
		[]byte(`{"queries": ["copper mines"], "topk": 3, "return_scores": true}`),
		[]byte(`{"queries": ["mayor of Varnak", "river Oss", "glass village"], "topk": 2}`),
		[]byte(`{"queries": ["founder of Dremmel"]}`),
		mustJSON(map[string]any{"queries": tooMany[:cfg.MaxQueries], "topk": cfg.MaxTopK, "return_scores": true}),
	}
	pooled := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: goodClients}}
	defer pooled.CloseIdleConnections()

	heap := watchHeap()
	start := time.Now()
	var (
		wg         sync.WaitGroup
		ok, busy   atomic.Int64
		mu         sync.Mutex
		unexpected []string
	)
	report := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		if len(unexpected) < 20 {
			unexpected = append(unexpected, fmt.Sprintf(format, args...))
		}
	}
	// send posts body and returns the status and the "error" of a JSON error body.
	send := func(c *http.Client, body []byte, chunked bool) (int, string, []byte, error) {
		var r io.Reader = bytes.NewReader(body)
		if chunked {
			r = io.MultiReader(r) // hides the length: sent chunked
		}
		resp, err := c.Post(url, "application/json", r)
		if err != nil {
			return 0, "", nil, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			return resp.StatusCode, "", nil, err
		}
		if resp.StatusCode == http.StatusOK {
			return resp.StatusCode, "", b, nil
		}
		var e errorBody
		if err := json.Unmarshal(b, &e); err != nil || e.Error == "" {
			return resp.StatusCode, "", b, fmt.Errorf("error body %q is not {\"error\": …}", snippet(b))
		}
		return resp.StatusCode, e.Error, b, nil
	}

	for i := range goodClients {
		wg.Go(func() {
			for j := range goodPerClient {
				body := goodBodies[(i+j)%len(goodBodies)]
				code, msg, b, err := send(pooled, body, false)
				switch {
				case err != nil:
					report("well-formed %s: %v", body, err)
				case code == http.StatusOK:
					var in apiRequest
					json.Unmarshal(body, &in)
					if _, err := decodeResult(b, len(in.Queries)); err != nil {
						report("well-formed %s: answer: %v", body, err)
					}
					ok.Add(1)
				case code == http.StatusServiceUnavailable && strings.Contains(msg, "(--max-inflight)"):
					busy.Add(1)
				default:
					report("well-formed %s: %d %q, want 200 or 503 naming --max-inflight", body, code, msg)
				}
			}
		})
	}
	for _, tt := range bad {
		for range tt.clients {
			wg.Go(func() {
				c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
				for {
					code, msg, _, err := send(c, tt.body, tt.chunked)
					switch {
					case err != nil:
						report("%s: %v", tt.name, err)
					case code == http.StatusServiceUnavailable && strings.Contains(msg, "(--max-inflight)"):
						time.Sleep(10 * time.Millisecond) // a full server; try again, as a client would
						continue
					case code != tt.status || !strings.Contains(msg, "("+tt.flag+")"):
						report("%s: %d %q, want %d naming %s", tt.name, code, msg, tt.status, tt.flag)
					}
					return
				}
			})
		}
	}
	for i := range stalledBodies + stalledHeaders {
		wg.Go(func() {
			partial := stalledBodyRequest
			if i >= stalledBodies {
				partial = stalledHeadersRequest
			}
			_, after, err := stall(addr, partial, httpserve.Seconds(readTimeoutS)+5*time.Second)
			switch {
			case err != nil:
				report("stalled client: %v", err)
			case after > httpserve.Seconds(readTimeoutS)+3*time.Second:
				report("stalled client: closed %v after its last byte, want about the %gs read timeout", after, readTimeoutS)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	growth := heap.growth()

	for _, u := range unexpected {
		t.Error(u)
	}
	total := int64(goodClients * goodPerClient)
	t.Logf("%d clients in %v (read timeout %.2gs): %d well-formed requests answered, %d refused as busy; heap grew by at most %d MiB",
		goodClients+stalledBodies+stalledHeaders+len(bad), elapsed, readTimeoutS, ok.Load(), busy.Load(), growth>>20)
	if ok.Load()+busy.Load() != total || ok.Load() < total/2 {
		t.Errorf("%d of %d well-formed requests answered, %d refused as busy; want most answered and the rest refused",
			ok.Load(), total, busy.Load())
	}
	if growth > maxHeapGrowth {
		t.Errorf("heap grew by %d MiB under load, want at most %d MiB", growth>>20, maxHeapGrowth>>20)
	}
	// The server still answers once the load is gone.
	if code, msg, _, err := send(pooled, goodBodies[0], false); err != nil || code != http.StatusOK {
		t.Errorf("request after the load = %d %q %v, want 200", code, msg, err)
	}
}
