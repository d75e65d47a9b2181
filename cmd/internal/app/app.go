// Package app is the command-line glue every mempo binary shares (urfave/cli v2):
// flags defined once with a Category, each also settable as a MEMPO_* environment
// variable and as a key of a JSON --config file, exit codes 0 ok / 1 failure / 2 usage
// error, each flag bound once to the config field it sets (bind.go), and the common
// stage flags resolved into a jobs.Spec. Precedence is flag > environment > config
// file > default.
package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/mempo/mempo/jobs"
)

// ErrUsage marks an error in how a binary was invoked: an unknown flag, a bad flag
// value, an unknown config key. Main exits 2 for it.
var ErrUsage = errors.New("usage error")

// Usage marks err, a bad flag value a stage found while resolving its config, as a
// usage error (exit 2).
func Usage(err error) error {
	if err == nil || errors.Is(err, ErrUsage) {
		return err
	}
	return fmt.Errorf("%w: %w", err, ErrUsage)
}

// Exit statuses.
const (
	ExitOK      = 0
	ExitFailure = 1
	ExitUsage   = 2
)

// New returns a binary's app: the flags fs binds, resolved into their fields before run
// is called, and the app prepared as Prepare describes.
func New(name, usage string, fs *Flags, run cli.ActionFunc) *cli.App {
	a := &cli.App{Name: name, Usage: usage, Flags: fs.cli(), Action: fs.action(run), HideHelpCommand: true}
	Prepare(a)
	return a
}

// Command gives cmd, a subcommand of a tool such as mempo, the flags fs binds and an
// action that resolves them into their fields (the --config file included) before run.
// Every action goes through New or Command: they are what apply --config.
func Command(cmd *cli.Command, fs *Flags, run cli.ActionFunc) *cli.Command {
	cmd.Flags, cmd.Action = fs.cli(), fs.action(run)
	return cmd
}

// Prepare wires an app (and its subcommands): a --config flag if it has none, MEMPO_*
// variables for every flag, flag parse errors marked ErrUsage, exit handling left to
// Main, and --version (version.go) with the build's short revision as the app's
// Version. A flag type Prepare does not know panics: every flag must get its
// environment variable.
func Prepare(a *cli.App) {
	if !hasFlag(a.Flags, ConfigFlag.Name) {
		a.Flags = append(a.Flags, Clone(ConfigFlag)...)
	}
	a.EnableBashCompletion = false
	if a.Version == "" {
		a.Version = ReadBuild().Short()
	}
	a.HideVersion = false
	a.ExitErrHandler = func(*cli.Context, error) {} // Main maps errors to exit codes
	a.OnUsageError = usageError
	setEnvVars(a.Flags)
	prepareCommands(a.Commands)
}

func prepareCommands(cmds []*cli.Command) {
	for _, c := range cmds {
		c.OnUsageError = usageError
		setEnvVars(c.Flags)
		prepareCommands(c.Subcommands)
	}
}

func usageError(_ *cli.Context, err error, _ bool) error {
	return fmt.Errorf("%w: %w", err, ErrUsage)
}

// Main runs a with args (os.Args) and returns the exit status. It warns about MEMPO_*
// variables no flag reads, cancels the run's context on SIGINT/SIGTERM, and prints a
// failure as one line naming the binary.
func Main(a *cli.App, args []string) int {
	stderr := a.ErrWriter
	if stderr == nil {
		stderr = os.Stderr
	}
	warnUnknownEnv(stderr, a, os.Environ())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return exitCode(stderr, a.Name, a.RunContext(ctx, args))
}

// exitCode prints err and maps it to an exit status.
func exitCode(stderr io.Writer, name string, err error) int {
	if err == nil {
		return ExitOK
	}
	var coder cli.ExitCoder
	switch {
	case errors.Is(err, ErrUsage) || errors.Is(err, jobs.ErrSpec) || missingRequired(err):
		fmt.Fprintf(stderr, "%s: %v\nRun '%s --help' for usage.\n", name, err, name)
		return ExitUsage
	case errors.As(err, &coder) && coder.ExitCode() != 0:
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return coder.ExitCode()
	}
	fmt.Fprintf(stderr, "%s: %v\n", name, err)
	return ExitFailure
}

// missingRequired reports urfave/cli's "Required flag(s) … not set" error, a usage
// error it does not route through OnUsageError and whose type it does not export.
func missingRequired(err error) bool {
	return strings.HasPrefix(err.Error(), "Required flag")
}

func hasFlag(flags []cli.Flag, name string) bool {
	for _, f := range flags {
		for _, n := range f.Names() {
			if n == name {
				return true
			}
		}
	}
	return false
}
