package main

import (
	"github.com/urfave/cli/v2"

	"github.com/mempo/mempo/cmd/internal/app"
	"github.com/mempo/mempo/model/torch"
)

func versionCommand() *cli.Command {
	return app.Command(&cli.Command{
		Name:  "version",
		Usage: "print the code version, the Go version and the linked libtorch with its devices (as --version does)",
	}, app.Bind(nil), runVersion)
}

func runVersion(c *cli.Context) error {
	app.WriteVersion(c.App.Writer, c.App)
	return nil
}

// linked records on a, the tools' app or a stage's, that mempo links libtorch, so that
// `mempo version` and --version name it: under any name mempo runs with libtorch loaded,
// the pure-Go stages included.
func linked(a *cli.App) *cli.App {
	return app.WithLibtorch(a, torch.Version, torch.CUDABuilt)
}
