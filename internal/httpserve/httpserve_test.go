package httpserve

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestCheck(t *testing.T) {
	ok := Timeouts{ReadHeader: 1, Read: 2, Write: 3, Idle: 4}
	if err := ok.Check(); err != nil {
		t.Fatalf("Check(%+v) = %v", ok, err)
	}
	for flag, bad := range map[string]Timeouts{
		"--read-header-timeout": {ReadHeader: 0, Read: 1, Write: 1, Idle: 1},
		"--read-timeout":        {ReadHeader: 1, Read: -1, Write: 1, Idle: 1},
		"--write-timeout":       {ReadHeader: 1, Read: 1, Write: 1e-12, Idle: 1},
	} {
		if err := bad.Check(); err == nil || !strings.Contains(err.Error(), flag) {
			t.Errorf("Check(%+v) = %v, want an error naming %s", bad, err, flag)
		}
	}
	if got := Seconds(1e300); got != 1<<63-1 {
		t.Errorf("Seconds(1e300) = %v, want the largest duration", got)
	}
}

// TestServeStops answers a request, then returns nil once its context is done.
func TestServeStops(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	go func() {
		done <- Serve(ctx, ln, h, Timeouts{ReadHeader: 1, Read: 1, Write: 1, Idle: 1}, "test server", nil)
	}()
	res, err := http.Get("http://" + ln.Addr().String() + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if string(body) != "ok" {
		t.Errorf("body %q, want ok", body)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Serve after the stop = %v, want nil", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return after its context was done")
	}
}
