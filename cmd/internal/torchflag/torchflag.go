// Package torchflag is the command-line glue of the binaries that run tensors: the
// libtorch runtime flags they share, applied once before a stage starts.
package torchflag

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/mempo/mempo/cmd/internal/app"
	"github.com/mempo/mempo/model/torch"
)

// Threads sets libtorch's intra-op thread pool. Small models decode faster on one
// thread than on several (measured on the tiny preset), large ones want every core.
var Threads = &cli.IntFlag{Name: "threads", Category: "Runtime",
	Usage: "libtorch intra-op threads; 0 keeps libtorch's choice (one per core)"}

// Apply applies the runtime flags of c; call it before any tensor work.
func Apply(c *cli.Context) error {
	n := c.Int(Threads.Name)
	if n == 0 {
		return nil
	}
	if err := torch.SetNumThreads(n); err != nil {
		return app.Usage(fmt.Errorf("--threads: %w", err))
	}
	return nil
}
