package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/mempo/mempo/audit"
	"github.com/mempo/mempo/cmd/internal/app"
)

// viewCmd is what 'mempo view' resolves its flags into.
type viewCmd struct {
	cfg audit.Config
}

func viewCommand() *cli.Command {
	v := &viewCmd{cfg: audit.Config{Addr: audit.DefaultAddr}}
	return app.Command(&cli.Command{
		Name:  "view",
		Usage: "browse a run in a local web page: datasets, questions turn by turn, token advantages, iterations side by side",
		Description: `Serves a read-only viewer of the run directory --run at http://ADDR/. It lists
the run's datasets and checkpoints (from their manifests and commit records), the
figures of each iteration and the evaluation report; shows one question's n
trajectories turn by turn (memory, action, observation, response, outcome reward,
P_mem, P_full, memory reward and advantages, gold answers the memory holds); a turn's
response tokens as a heat map of their advantages; and one question across
iterations. Datasets are read only when a page needs them. The JSON API is under
/api/ (run, dataset, questions, question, tokens, compare).

The viewer has no authentication: it listens on loopback only unless --allow-remote
is given. SIGINT or SIGTERM stops it.`,
	}, v.flags(), v.run)
}

func (v *viewCmd) flags() *app.Flags {
	return app.Bind(nil, []app.Flag{
		app.String(&v.cfg.Run, cli.StringFlag{Name: "run", Category: "View", Required: true, TakesFile: true,
			Usage: "run directory to browse (e.g. runs/demo)"}),
		app.String(&v.cfg.Addr, cli.StringFlag{Name: "addr", Category: "View",
			Usage: "host:port to listen on; a non-loopback host needs --allow-remote"}),
		app.Bool(&v.cfg.AllowRemote, cli.BoolFlag{Name: "allow-remote", Category: "View",
			Usage: "allow a non-loopback --addr and answer requests for any host name (anyone who can reach it reads the run)"}),
	})
}

func (v *viewCmd) run(c *cli.Context) error {
	if err := audit.CheckAddr(v.cfg.Addr, v.cfg.AllowRemote); err != nil {
		return app.Usage(fmt.Errorf("--addr: %w", err))
	}
	srv, err := audit.New(v.cfg, slog.Default())
	if errors.Is(err, audit.ErrNotFound) {
		return app.Usage(fmt.Errorf("--run: %w", err))
	}
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", v.cfg.Addr)
	if err != nil {
		return fmt.Errorf("--addr %s: %w", v.cfg.Addr, err)
	}
	ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
	defer stop()
	fmt.Fprintf(c.App.Writer, "viewing %s at http://%s/\n", v.cfg.Run, ln.Addr())
	return audit.Serve(ctx, ln, srv)
}
