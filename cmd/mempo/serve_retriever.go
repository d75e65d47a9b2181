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
)

var (
	serveRetrieverIndexFlag = &cli.StringFlag{
		Name:      "index",
		Usage:     "index directory built by 'mempo index'",
		EnvVars:   []string{"MEMPO_INDEX"},
		Category:  "Retrieval server",
		Required:  true,
		TakesFile: true,
	}
	serveRetrieverAddrFlag = &cli.StringFlag{
		Name:     "addr",
		Usage:    "host:port to listen on (Search-R1's default port is 8000)",
		Value:    "127.0.0.1:8000",
		EnvVars:  []string{"MEMPO_ADDR"},
		Category: "Retrieval server",
	}
	serveRetrieverTopKFlag = &cli.IntFlag{
		Name:     "topk",
		Usage:    `passages per query when a request has no "topk"`,
		Value:    3,
		EnvVars:  []string{"MEMPO_TOPK"},
		Category: "Retrieval server",
	}
	serveRetrieverMaxTopKFlag = &cli.IntFlag{
		Name:     "max-topk",
		Usage:    `largest "topk" a request may ask for`,
		Value:    100,
		EnvVars:  []string{"MEMPO_MAX_TOPK"},
		Category: "Retrieval server",
	}
	serveRetrieverMaxQueriesFlag = &cli.IntFlag{
		Name:     "max-queries",
		Usage:    "most queries in one request",
		Value:    4096,
		EnvVars:  []string{"MEMPO_MAX_QUERIES"},
		Category: "Retrieval server",
	}
	serveRetrieverWorkersFlag = &cli.IntFlag{
		Name:     "workers",
		Usage:    "queries of one request searched at once (0: one per CPU)",
		EnvVars:  []string{"MEMPO_WORKERS"},
		Category: "Retrieval server",
	}
)

var serveRetrieverCommand = &cli.Command{
	Name:  "serve-retriever",
	Usage: "serve a local index under the Search-R1 retrieval API",
	Description: `Answers POST /retrieve with {"queries": [...], "topk": 3, "return_scores": true}
as Search-R1's retrieval_server.py does, so mempo-rollout, Search-R1 or verl can use
it by URL (http://ADDR/retrieve). GET /health answers {"status": "ok"}. SIGINT or
SIGTERM stops accepting requests and lets those in flight finish.`,
	Flags: []cli.Flag{
		serveRetrieverIndexFlag, serveRetrieverAddrFlag, serveRetrieverTopKFlag,
		serveRetrieverMaxTopKFlag, serveRetrieverMaxQueriesFlag, serveRetrieverWorkersFlag,
	},
	Action: runServeRetriever,
}

func runServeRetriever(c *cli.Context) error {
	cfg := search.ServerConfig{
		DefaultTopK: c.Int(serveRetrieverTopKFlag.Name),
		MaxTopK:     c.Int(serveRetrieverMaxTopKFlag.Name),
		MaxQueries:  c.Int(serveRetrieverMaxQueriesFlag.Name),
	}
	if cfg.DefaultTopK < 1 || cfg.MaxTopK < cfg.DefaultTopK || cfg.MaxQueries < 1 {
		return cli.Exit(fmt.Sprintf("--topk %d, --max-topk %d, --max-queries %d: want 1 <= topk <= max-topk and max-queries >= 1",
			cfg.DefaultTopK, cfg.MaxTopK, cfg.MaxQueries), 2)
	}
	workers := c.Int(serveRetrieverWorkersFlag.Name)
	if workers < 0 {
		return cli.Exit(fmt.Sprintf("--workers %d: want 0 (one per CPU) or more", workers), 2)
	}
	idx, err := search.OpenLocal(c.String(serveRetrieverIndexFlag.Name), search.LocalConfig{Workers: workers})
	if err != nil {
		return err
	}
	defer idx.Close()
	addr := c.String(serveRetrieverAddrFlag.Name)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("--addr %s: %w", addr, err)
	}
	ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.Default()
	log.Info("serving index", "index", c.String(serveRetrieverIndexFlag.Name), "passages", idx.Meta().Docs,
		"url", "http://"+ln.Addr().String()+"/retrieve")
	return search.Serve(ctx, ln, search.NewHandler(idx, cfg, log), log)
}
