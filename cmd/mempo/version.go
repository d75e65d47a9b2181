package main

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/mempo/mempo/model/torch"
)

var versionCommand = &cli.Command{
	Name:  "version",
	Usage: "print the code version and the linked libtorch",
	Action: func(c *cli.Context) error {
		fmt.Fprintf(c.App.Writer, "mempo (libtorch %s, %d threads)\n", torch.Version(), torch.NumThreads())
		return nil
	},
}
