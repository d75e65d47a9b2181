package main

import (
	"github.com/urfave/cli/v2"

	"github.com/mempo/mempo/cmd/internal/app"
)

// timeoutFlags binds a server's connection timeouts (internal/httpserve.Timeouts), in
// seconds, to --read-header-timeout, --read-timeout, --write-timeout and
// --idle-timeout; answer says what the write timeout covers besides sending the
// answer, and what happens to it when the timeout passes.
func timeoutFlags(readHeader, read, write, idle *float64, answer string) []app.Flag {
	return []app.Flag{
		app.Float64(readHeader, cli.Float64Flag{Name: "read-header-timeout", Category: "Limits",
			Usage: "seconds a client may take to send its request headers before its connection is closed"}),
		app.Float64(read, cli.Float64Flag{Name: "read-timeout", Category: "Limits",
			Usage: "seconds a client may take to send a whole request, body included, before it gets 408 and its connection is closed"}),
		app.Float64(write, cli.Float64Flag{Name: "write-timeout", Category: "Limits",
			Usage: "seconds from a request's headers to the end of its answer, " + answer}),
		app.Float64(idle, cli.Float64Flag{Name: "idle-timeout", Category: "Limits",
			Usage: "seconds a keep-alive connection may wait for its next request"}),
	}
}
