package main

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/mempo/mempo/cmd/internal/app"
	"github.com/mempo/mempo/model/torch"
)

func versionCommand() *cli.Command {
	return app.Command(&cli.Command{
		Name:  "version",
		Usage: "print the code version and the linked libtorch",
	}, app.Bind(nil), runVersion)
}

func runVersion(c *cli.Context) error {
	fmt.Fprintf(c.App.Writer, "mempo (libtorch %s, %d threads)\n", torch.Version(), torch.NumThreads())
	return nil
}
