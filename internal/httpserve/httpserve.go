// Package httpserve runs the project's HTTP servers (the retrieval server and the
// policy server) with bounded connections and a graceful stop.
package httpserve

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// Timeouts of one connection, in seconds as the servers' flags give them: reading the
// headers, reading the whole request, from the headers to the end of the answer, and
// a keep-alive connection's wait for its next request.
type Timeouts struct {
	ReadHeader, Read, Write, Idle float64
}

// Check names the first timeout that is not a positive number of seconds by its
// flag (--read-header-timeout, --read-timeout, --write-timeout, --idle-timeout).
func (t Timeouts) Check() error {
	for _, f := range []struct {
		flag string
		s    float64
	}{
		{"--read-header-timeout", t.ReadHeader}, {"--read-timeout", t.Read},
		{"--write-timeout", t.Write}, {"--idle-timeout", t.Idle},
	} {
		if !(f.s > 0) || Seconds(f.s) <= 0 {
			return fmt.Errorf("%s %g: want a positive number of seconds", f.flag, f.s)
		}
	}
	return nil
}

// Seconds converts seconds to a duration, saturating rather than overflowing.
func Seconds(s float64) time.Duration {
	const most = float64(1<<63 - 1)
	if d := s * float64(time.Second); d < most {
		return time.Duration(d)
	}
	return 1<<63 - 1
}

// ShutdownGrace is how long in-flight requests may finish after the stop.
const ShutdownGrace = 10 * time.Second

// MaxHeaderBytes bounds a request's headers: these APIs' are a few hundred bytes.
const MaxHeaderBytes = 64 << 10

// Serve answers h on ln with the timeouts t until ctx is done, then stops accepting
// and gives in-flight requests ShutdownGrace to finish. name labels its log lines.
// It returns nil after a clean stop, or the error that ended serving.
func Serve(ctx context.Context, ln net.Listener, h http.Handler, t Timeouts, name string, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: Seconds(t.ReadHeader),
		ReadTimeout:       Seconds(t.Read),
		WriteTimeout:      Seconds(t.Write),
		IdleTimeout:       Seconds(t.Idle),
		MaxHeaderBytes:    MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	log.Info(name+" listening", "addr", ln.Addr().String())
	select {
	case err := <-done:
		return fmt.Errorf("serve %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	log.Info(name+" shutting down", "addr", ln.Addr().String())
	sctx, cancel := context.WithTimeout(context.Background(), ShutdownGrace)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		srv.Close()
		<-done
		return fmt.Errorf("serve %s: shutdown: %w", ln.Addr(), err)
	}
	<-done // http.ErrServerClosed
	return nil
}
