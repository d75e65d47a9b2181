package app

import (
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"

	"github.com/urfave/cli/v2"
)

// EnvPrefix starts every variable that sets a mempo flag.
const EnvPrefix = "MEMPO_"

// EnvName is the variable that sets flag name: MEMPO_ then the name upper-cased with
// '-' as '_' (--shard-count → MEMPO_SHARD_COUNT). It is derived, never written by
// hand, so a flag and its variable cannot drift apart.
func EnvName(name string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// setEnvVars gives every flag its derived variable. urfave/cli has no setter on the
// Flag interface, so each flag type is listed; an unlisted type is a programmer error.
func setEnvVars(flags []cli.Flag) {
	for _, f := range flags {
		env := []string{EnvName(f.Names()[0])}
		switch f := f.(type) {
		case *cli.StringFlag:
			f.EnvVars = env
		case *cli.BoolFlag:
			f.EnvVars = env
		case *cli.IntFlag:
			f.EnvVars = env
		case *cli.Int64Flag:
			f.EnvVars = env
		case *cli.UintFlag:
			f.EnvVars = env
		case *cli.Uint64Flag:
			f.EnvVars = env
		case *cli.Float64Flag:
			f.EnvVars = env
		case *cli.DurationFlag:
			f.EnvVars = env
		case *cli.PathFlag:
			f.EnvVars = env
		case *cli.StringSliceFlag:
			f.EnvVars = env
		case *cli.IntSliceFlag:
			f.EnvVars = env
		case *cli.Float64SliceFlag:
			f.EnvVars = env
		case *cli.GenericFlag:
			f.EnvVars = env
		default:
			panic(fmt.Sprintf("app: flag --%s has type %T, which setEnvVars does not know", f.Names()[0], f))
		}
	}
}

// knownEnv lists the variables the app's flags read, across all subcommands.
func knownEnv(a *cli.App) []string {
	var names []string
	add := func(flags []cli.Flag) {
		for _, f := range flags {
			names = append(names, EnvName(f.Names()[0]))
		}
	}
	var walk func([]*cli.Command)
	walk = func(cmds []*cli.Command) {
		for _, c := range cmds {
			add(c.Flags)
			walk(c.Subcommands)
		}
	}
	add(a.Flags)
	walk(a.Commands)
	sort.Strings(names)
	return names
}

// warnUnknownEnv warns about each MEMPO_* variable in environ that no flag reads: a
// misspelt MEMPO_SEDE would otherwise be ignored without a word.
func warnUnknownEnv(w io.Writer, a *cli.App, environ []string) {
	known := knownEnv(a)
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, EnvPrefix) && !slices.Contains(known, name) {
			fmt.Fprintf(w, "%s: warning: %s is set but no flag reads it; ignored (known: %s)\n",
				a.Name, name, strings.Join(known, ", "))
		}
	}
}
