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

// serveRetrieverCmd is what 'mempo serve-retriever' resolves its flags into. The
// limits default to what search.NewHandler takes for a zero field, named here because
// the search package exports no defaults of its own.
type serveRetrieverCmd struct {
	cfg     search.ServerConfig
	index   string
	addr    string
	workers int
}

func serveRetrieverCommand() *cli.Command {
	s := &serveRetrieverCmd{cfg: search.ServerConfig{DefaultTopK: 3, MaxTopK: 100, MaxQueries: 4096}, addr: "127.0.0.1:8000"}
	return app.Command(&cli.Command{
		Name:  "serve-retriever",
		Usage: "serve a local index under the Search-R1 retrieval API",
		Description: `Answers POST /retrieve with {"queries": [...], "topk": 3, "return_scores": true}
as Search-R1's retrieval_server.py does, so mempo-rollout, Search-R1 or verl can use
it by URL (http://ADDR/retrieve). GET /health answers {"status": "ok"}. SIGINT or
SIGTERM stops accepting requests and lets those in flight finish.`,
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
		app.Int(&s.cfg.MaxTopK, cli.IntFlag{Name: "max-topk", Category: "Retrieval server",
			Usage: `largest "topk" a request may ask for`}),
		app.Int(&s.cfg.MaxQueries, cli.IntFlag{Name: "max-queries", Category: "Retrieval server",
			Usage: "most queries in one request"}),
		app.Int(&s.workers, cli.IntFlag{Name: "workers", Category: "Retrieval server",
			Usage: "queries of one request searched at once (0: one per CPU)"}),
	})
}

func (s *serveRetrieverCmd) run(c *cli.Context) error {
	cfg := s.cfg
	if cfg.DefaultTopK < 1 || cfg.MaxTopK < cfg.DefaultTopK || cfg.MaxQueries < 1 {
		return cli.Exit(fmt.Sprintf("--topk %d, --max-topk %d, --max-queries %d: want 1 <= topk <= max-topk and max-queries >= 1",
			cfg.DefaultTopK, cfg.MaxTopK, cfg.MaxQueries), 2)
	}
	if s.workers < 0 {
		return cli.Exit(fmt.Sprintf("--workers %d: want 0 (one per CPU) or more", s.workers), 2)
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
	return search.Serve(ctx, ln, search.NewHandler(idx, cfg, log), log)
}
