package main

import (
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/mempo/mempo/agent/search"
	"github.com/mempo/mempo/cmd/internal/app"
)

// serveRetrieverCmd is what 'mempo serve-retriever' resolves its flags into; the
// limits start from search.DefaultServerConfig, so --help shows its defaults.
type serveRetrieverCmd struct {
	cfg     search.ServerConfig
	index   string
	addr    string
	workers int
}

func serveRetrieverCommand() *cli.Command {
	s := &serveRetrieverCmd{cfg: search.DefaultServerConfig(), addr: "127.0.0.1:8000"}
	return app.Command(&cli.Command{
		Name:  "serve-retriever",
		Usage: "serve a local index under the Search-R1 retrieval API",
		Description: `Answers POST /retrieve with {"queries": [...], "topk": 3, "return_scores": true}
as Search-R1's retrieval_server.py does, so mempo-rollout, Search-R1 or verl can use
it by URL (http://ADDR/retrieve). GET /health answers {"status": "ok"}. SIGINT or
SIGTERM stops accepting requests and lets those in flight finish.

Every request is bounded (see Limits): a refused one gets {"error": "...", "detail":
"..."} naming the limit and its flag, with 413 for a body over --max-body-bytes, 400
for a malformed request or a field over its limit (--max-queries, --max-query-bytes,
--max-topk), 408 for a body not received within --read-timeout, and 503 (with
Retry-After) when --max-inflight requests are already being served; requests beyond
that are refused, not queued. Decoding a body takes up to about 3x its size, so
bodies in memory stay under about 3 x --max-inflight x --max-body-bytes.`,
	}, s.flags(), s.run)
}

func (s *serveRetrieverCmd) flags() *app.Flags {
	return app.Bind(nil, []app.Flag{
		app.String(&s.index, cli.StringFlag{Name: "index", Category: "Retrieval server", Required: true, TakesFile: true,
			Usage: "index directory built by 'mempo index'"}),
		app.String(&s.addr, cli.StringFlag{Name: "addr", Category: "Retrieval server",
			Usage: "host:port to listen on (Search-R1's default port is 8000)"}),
		app.Int(&s.cfg.DefaultTopK, cli.IntFlag{Name: "topk", Category: "Retrieval server",
			Usage: `passages per query when a request has no "topk"`}),
		app.Int(&s.workers, cli.IntFlag{Name: "workers", Category: "Retrieval server",
			Usage: "queries of one request searched at once (0: one per CPU)"}),
	}, []app.Flag{
		app.Int(&s.cfg.MaxTopK, cli.IntFlag{Name: "max-topk", Category: "Limits",
			Usage: `largest "topk" a request may ask for; more is refused with 400`}),
		app.Int(&s.cfg.MaxQueries, cli.IntFlag{Name: "max-queries", Category: "Limits",
			Usage: "most queries in one request; more is refused with 400"}),
		app.Int(&s.cfg.MaxQueryBytes, cli.IntFlag{Name: "max-query-bytes", Category: "Limits",
			Usage: "longest query, in bytes (analysis costs 200-300 bytes of memory per byte); longer is refused with 400"}),
		app.Int64(&s.cfg.MaxBodyBytes, cli.Int64Flag{Name: "max-body-bytes", Category: "Limits",
			Usage: "largest request body, in bytes; larger is refused with 413"}),
		app.Int(&s.cfg.MaxInflight, cli.IntFlag{Name: "max-inflight", Category: "Limits",
			Usage: "most /retrieve requests served at once, counted from before the body is read; one more is refused with 503"}),
	}, timeoutFlags(&s.cfg.ReadHeaderTimeoutS, &s.cfg.ReadTimeoutS, &s.cfg.WriteTimeoutS, &s.cfg.IdleTimeoutS,
		"retrieval included; retrieval is then canceled"))
}

func (s *serveRetrieverCmd) run(c *cli.Context) error {
	cfg := s.cfg
	if err := cfg.Validate(); err != nil {
		return app.Usage(err)
	}
	if s.workers < 0 {
		return app.Usage(fmt.Errorf("--workers %d: want 0 (one per CPU) or more", s.workers))
	}
	idx, err := search.OpenLocal(s.index, search.LocalConfig{Workers: s.workers})
	if err != nil {
		return err
	}
	defer idx.Close()
	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		return fmt.Errorf("--addr %s: %w", s.addr, err)
	}
	ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.Default()
	log.Info("serving index", "index", s.index, "passages", idx.Meta().Docs,
		"url", "http://"+ln.Addr().String()+"/retrieve")
	return search.Serve(ctx, ln, search.NewHandler(idx, cfg, log), cfg, log)
}
