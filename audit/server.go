package audit

import (
	"bytes"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"time"

	"github.com/mempo/mempo/format"
)

//go:embed static
var static embed.FS

// CSP allows only this server's own script, style and JSON: no inline script or style,
// no other origin, no framing. Model text reaches the page as JSON data and is inserted
// as text (textContent), so even a missed escape could not run script.
const CSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; " +
	"base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Config is what 'mempo view' resolves its flags into.
type Config struct {
	Run         string `json:"run"`          // the run directory
	Addr        string `json:"addr"`         // host:port to listen on
	AllowRemote bool   `json:"allow_remote"` // listen on and answer a non-loopback address
}

// DefaultAddr is the loopback address the viewer listens on by default.
const DefaultAddr = "127.0.0.1:8080"

// ErrRemote marks a listen address that is not loopback while AllowRemote is off.
var ErrRemote = errors.New("not a loopback address")

// CheckAddr refuses a listen address that is not loopback unless allowRemote is set:
// the viewer has no authentication, and a run holds unreleased data.
func CheckAddr(addr string, allowRemote bool) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("address %q: %w", addr, err)
	}
	if allowRemote || isLoopback(host) {
		return nil
	}
	return fmt.Errorf("address %q: host %q is %w; the viewer has no authentication, so pass --allow-remote to serve it to other machines", addr, host, ErrRemote)
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Server answers the viewer's pages and JSON API over one run directory. It is an
// http.Handler; it never writes into the run.
type Server struct {
	s           *store
	allowRemote bool
	mux         *http.ServeMux
	log         *slog.Logger
}

// New returns a viewer of the run directory run. Nothing under it is read until a page
// asks for it, except that run must be a directory.
func New(cfg Config, log *slog.Logger) (*Server, error) {
	root, err := filepath.Abs(cfg.Run)
	if err != nil {
		return nil, fmt.Errorf("run %s: %w", cfg.Run, err)
	}
	if !exists(root) {
		return nil, fmt.Errorf("run %s: no such directory: %w", cfg.Run, ErrNotFound)
	}
	// The run's directory walk does not follow links, so a linked run is resolved first.
	if root, err = filepath.EvalSymlinks(root); err != nil {
		return nil, fmt.Errorf("run %s: %w", cfg.Run, err)
	}
	if log == nil {
		log = slog.Default()
	}
	v := &Server{s: newStore(root), allowRemote: cfg.AllowRemote, mux: http.NewServeMux(), log: log}
	sub, _ := fs.Sub(static, "static")
	files := http.FileServerFS(sub)
	v.mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		http.ServeFileFS(w, r, sub, "index.html")
	})
	v.mux.Handle("GET /static/", http.StripPrefix("/static/", files))
	v.mux.HandleFunc("GET /api/run", v.api(func(r *http.Request) (any, error) { return v.s.overview() }))
	v.mux.HandleFunc("GET /api/dataset", v.api(v.dataset))
	v.mux.HandleFunc("GET /api/questions", v.api(v.questions))
	v.mux.HandleFunc("GET /api/question", v.api(func(r *http.Request) (any, error) {
		return v.s.question(r.FormValue("group"), r.FormValue("uid"))
	}))
	v.mux.HandleFunc("GET /api/tokens", v.api(v.tokens))
	v.mux.HandleFunc("GET /api/rewards", v.api(func(r *http.Request) (any, error) {
		return v.s.rewards(r.FormValue("series"))
	}))
	v.mux.HandleFunc("GET /api/compare", v.api(func(r *http.Request) (any, error) {
		return v.s.compare(r.FormValue("series"), r.FormValue("uid"))
	}))
	v.mux.HandleFunc("/api/", v.api(func(r *http.Request) (any, error) {
		return nil, fmt.Errorf("%s %s: no such API: %w", r.Method, r.URL.Path, ErrNotFound)
	}))
	return v, nil
}

// ServeHTTP sets the security headers of every answer and refuses a request whose Host
// is not loopback unless remote access is allowed, so a web page of another origin
// cannot reach the viewer through DNS rebinding.
func (v *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", CSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Cache-Control", "no-store")
	if !v.allowRemote {
		host, _, err := net.SplitHostPort(r.Host)
		if err != nil {
			host = r.Host
		}
		if !isLoopback(host) {
			http.Error(w, "host "+strconv.Quote(r.Host)+" refused: the viewer answers loopback hosts only", http.StatusForbidden)
			return
		}
	}
	v.mux.ServeHTTP(w, r)
}

// apiError is the body of every failed API request.
type apiError struct {
	Error  string `json:"error"`
	Status int    `json:"status"`
}

// errBadRequest marks a malformed query parameter.
var errBadRequest = errors.New("bad request")

func (v *Server) api(fn func(*http.Request) (any, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		res, err := fn(r)
		status := http.StatusOK
		if err != nil {
			status = statusOf(err)
			res = apiError{Error: err.Error(), Status: status}
			v.log.Warn("view", "path", r.URL.Path, "query", r.URL.RawQuery, "err", err)
		}
		// Encode before writing, so a value JSON cannot hold (a NaN in a corrupt shard)
		// is an error answer, not a cut-off one. SetEscapeHTML writes <, > and & as \u
		// escapes: no markup survives even a wrong content type.
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(true)
		if err := enc.Encode(res); err != nil {
			status = http.StatusUnprocessableEntity
			buf.Reset()
			enc.Encode(apiError{Error: fmt.Sprintf("%s: the answer holds a value JSON cannot: %v (a NaN or infinite number in the data?)", r.URL.Path, err), Status: status})
		}
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		w.WriteHeader(status)
		if _, err := w.Write(buf.Bytes()); err != nil {
			v.log.Warn("view: write answer", "path", r.URL.Path, "err", err)
		}
		v.log.Debug("view", "path", r.URL.Path, "status", status, "ms", time.Since(start).Milliseconds())
	}
}

func statusOf(err error) int {
	switch {
	case errors.Is(err, errBadRequest):
		return http.StatusBadRequest
	case errors.Is(err, ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, ErrIncomplete):
		return http.StatusConflict
	case errors.Is(err, format.ErrCorrupt), errors.Is(err, format.ErrSchemaMismatch), errors.Is(err, format.ErrNotDataset):
		return http.StatusUnprocessableEntity
	}
	return http.StatusInternalServerError
}

func (v *Server) dataset(r *http.Request) (any, error) {
	rel := r.FormValue("path")
	dir, err := v.s.abs(rel)
	if err != nil {
		return nil, err
	}
	if !exists(dir) {
		return nil, fmt.Errorf("dataset %s: no such directory: %w", rel, ErrNotFound)
	}
	if _, err := openChecked(dir); err != nil {
		return nil, err
	}
	return describeDataset(rel, dir), nil
}

func (v *Server) questions(r *http.Request) (any, error) {
	f := QuestionFilter{Text: r.FormValue("q"), Invalid: r.FormValue("invalid") == "1"}
	for name, dst := range map[string]**float64{"min": &f.MinReward, "max": &f.MaxReward} {
		if s := r.FormValue(name); s != "" {
			x, err := strconv.ParseFloat(s, 64)
			if err != nil {
				return nil, fmt.Errorf("%s=%q: want a number: %w", name, s, errBadRequest)
			}
			*dst = &x
		}
	}
	return v.s.questions(r.FormValue("group"), f)
}

func (v *Server) tokens(r *http.Request) (any, error) {
	var n [2]int32
	for i, name := range []string{"sample", "turn"} {
		x, err := strconv.ParseInt(r.FormValue(name), 10, 32)
		if err != nil || x < 0 {
			return nil, fmt.Errorf("%s=%q: want a count from 0: %w", name, r.FormValue(name), errBadRequest)
		}
		n[i] = int32(x)
	}
	return v.s.tokens(r.FormValue("group"), r.FormValue("uid"), n[0], n[1])
}

// Serve answers h on ln until ctx is done, then lets requests in flight finish.
func Serve(ctx context.Context, ln net.Listener, h http.Handler) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: time.Minute}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return srv.Shutdown(shut)
}
