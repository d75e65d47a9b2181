package app

import (
	"cmp"
	"fmt"
	"math"
	"reflect"
	"strings"

	"github.com/urfave/cli/v2"
)

// A Flag is one command-line flag bound to the field it sets, so that the flag is
// written once: its definition next to a pointer to its field. The typed constructors
// (String, Int, Float64, Enum, …) take the urfave flag by value and keep their own copy,
// so every command parses into flags of its own (see Clone), and they take the flag's
// default from the field, which holds the stage's DefaultConfig: the stage states each
// default once, and --help shows it.
type Flag struct {
	flag cli.Flag
	// store writes the parsed value into the field when the command line, the
	// environment or --config set the flag; nil for a flag the action reads itself
	// (the stage flags StageSpec resolves).
	store func(*cli.Context) error
}

// Flags are one command's bound flags and the stage Config that --config's field names
// decode into. New and Command attach them to an app or subcommand.
type Flags struct {
	config any
	flags  []Flag
}

// Bind gathers a command's flags, group by group. config points at the stage Config
// the flags are bound to, already holding its DefaultConfig: a --config file may then
// set any of its fields by the JSON name the stage records (config.go); nil for a
// command without one.
func Bind(config any, groups ...[]Flag) *Flags {
	if t := reflect.TypeOf(config); config != nil && (t.Kind() != reflect.Pointer || t.Elem().Kind() != reflect.Struct) {
		panic(fmt.Sprintf("app: Bind(%T): want a pointer to the stage's Config struct, or nil", config))
	}
	fs := &Flags{config: config}
	for _, g := range groups {
		fs.flags = append(fs.flags, g...)
	}
	return fs
}

// cli returns the urfave flags, in the order bound.
func (fs *Flags) cli() []cli.Flag {
	out := make([]cli.Flag, len(fs.flags))
	for i, f := range fs.flags {
		out[i] = f.flag
	}
	return out
}

// action resolves the command's settings — the --config file, then every flag the
// command line or the environment set — and then calls run. Precedence is therefore
// flag > environment > config file > the Config's defaults.
func (fs *Flags) action(run cli.ActionFunc) cli.ActionFunc {
	return func(c *cli.Context) error {
		if err := applyConfig(c, fs.config); err != nil {
			return err
		}
		for _, f := range fs.flags {
			if f.store == nil || !c.IsSet(f.flag.Names()[0]) {
				continue // an unset flag leaves its field as the defaults or --config left it
			}
			if err := f.store(c); err != nil {
				return err
			}
		}
		return run(c)
	}
}

// Then returns f with fn run after f stores its value, for a setting whose effect goes
// beyond its field (libtorch's thread pool); fn's error comes back naming the flag.
func (f Flag) Then(fn func() error) Flag {
	return f.ThenWith(func(*cli.Context) error { return fn() })
}

// ThenWith is Then for a setting whose effect depends on the command's other flags,
// which fn reads from c.
func (f Flag) ThenWith(fn func(c *cli.Context) error) Flag {
	store, name := f.store, f.flag.Names()[0]
	f.store = func(c *cli.Context) error {
		if store != nil {
			if err := store(c); err != nil {
				return err
			}
		}
		return flagError(name, fn(c))
	}
	return f
}

// Check returns f with valid run after f stores its value: a value valid refuses is a
// usage error naming the flag, found while the flags are resolved rather than by the
// stage after it has opened its inputs or created its temp dir.
func (f Flag) Check(valid func() error) Flag {
	return f.Then(func() error { return Usage(valid()) })
}

// AtLeast returns a check, for Check, that *v is at least lo: a count whose zero has
// no documented meaning is refused at parse time.
func AtLeast[T cmp.Ordered](v *T, lo T) func() error {
	return func() error {
		if *v < lo {
			return fmt.Errorf("%v: want at least %v", *v, lo)
		}
		return nil
	}
}

// Unbound returns copies of flag templates that the action reads itself, such as the
// stage flags StageSpec resolves into a jobs.Spec.
func Unbound(templates ...cli.Flag) []Flag {
	flags := Clone(templates...)
	out := make([]Flag, len(flags))
	for i, f := range flags {
		out[i] = Flag{flag: f}
	}
	return out
}

// bound pairs flag f with a store that reads its value back with get.
func bound[T any](dst *T, f cli.Flag, get func(*cli.Context, string) T) Flag {
	return Flag{flag: f, store: func(c *cli.Context) error {
		*dst = get(c, f.Names()[0])
		return nil
	}}
}

// String binds a string flag to *dst.
func String(dst *string, f cli.StringFlag) Flag {
	f.Value = *dst
	return bound(dst, &f, (*cli.Context).String)
}

// Bool binds a boolean flag to *dst.
func Bool(dst *bool, f cli.BoolFlag) Flag {
	f.Value = *dst
	return bound(dst, &f, (*cli.Context).Bool)
}

// Int binds an int flag to *dst.
func Int(dst *int, f cli.IntFlag) Flag {
	f.Value = *dst
	return bound(dst, &f, (*cli.Context).Int)
}

// Int64 binds an int64 flag to *dst.
func Int64(dst *int64, f cli.Int64Flag) Flag {
	f.Value = *dst
	return bound(dst, &f, (*cli.Context).Int64)
}

// Uint64 binds a uint64 flag to *dst.
func Uint64(dst *uint64, f cli.Uint64Flag) Flag {
	f.Value = *dst
	return bound(dst, &f, (*cli.Context).Uint64)
}

// Float64 binds a float64 flag to *dst. The flag parser reads "Inf" and "NaN" as
// numbers; no setting of any stage means either, so they are usage errors naming the
// flag here instead of failures deep inside the stage.
func Float64(dst *float64, f cli.Float64Flag) Flag {
	f.Value = *dst
	return bound(dst, &f, (*cli.Context).Float64).Check(func() error {
		if math.IsNaN(*dst) || math.IsInf(*dst, 0) {
			return fmt.Errorf("%v: want a finite number", *dst)
		}
		return nil
	})
}

// Strings binds a repeatable string flag to *dst.
func Strings(dst *[]string, f cli.StringSliceFlag) Flag {
	f.Value = nil
	if len(*dst) > 0 {
		f.Value = cli.NewStringSlice(*dst...)
	}
	return bound(dst, &f, (*cli.Context).StringSlice)
}

// Enum binds a string flag to a field of a string type whose values parse checks (a
// stage's ParseKL, ParseReward, …); a value parse refuses is a usage error naming the
// flag. A nil parse takes the text as it is, for a type the stage's Validate checks.
func Enum[T ~string](dst *T, f cli.StringFlag, parse func(string) (T, error)) Flag {
	if parse == nil {
		parse = func(s string) (T, error) { return T(s), nil }
	}
	f.Value = string(*dst)
	return Text(dst, f, parse)
}

// Text binds a string flag to a field of any type that parse reads from the flag's
// text, e.g. a "const:0.5" baseline or a "2,4,6" list; a value parse refuses is a usage
// error naming the flag. The field's type has no text form here, so the template's
// Value gives the default text: derive it from the same Config.
func Text[T any](dst *T, f cli.StringFlag, parse func(string) (T, error)) Flag {
	return Load(dst, f, func(s string) (T, error) {
		v, err := parse(s)
		return v, Usage(err)
	})
}

// Load binds a string flag naming a file to the field load reads it into, e.g. a
// protocol description; load's error comes back naming the flag, with its class
// unchanged (a file that cannot be read is a failure, not a usage error).
func Load[T any](dst *T, f cli.StringFlag, load func(string) (T, error)) Flag {
	return Func(f, func(s string) error {
		v, err := load(s)
		if err != nil {
			return err
		}
		*dst = v
		return nil
	})
}

// List binds a repeatable string flag to a slice whose elements parse reads, e.g.
// NAME=DIR pairs; an element parse refuses is a usage error naming the flag.
func List[T any](dst *[]T, f cli.StringSliceFlag, parse func(string) (T, error)) Flag {
	name := f.Name
	return Flag{flag: &f, store: func(c *cli.Context) error {
		var out []T
		for _, s := range c.StringSlice(name) {
			v, err := parse(s)
			if err != nil {
				return flagError(name, Usage(err))
			}
			out = append(out, v)
		}
		*dst = out
		return nil
	}}
}

// Func binds a string flag to set, which applies its text where no single field takes
// it, e.g. a protocol file's answer tags into two fields. set's error comes back naming the flag, with its class
// unchanged (a file that cannot be read is a failure, not a usage error).
func Func(f cli.StringFlag, set func(string) error) Flag {
	name := f.Name
	return Flag{flag: &f, store: func(c *cli.Context) error {
		return flagError(name, set(c.String(name)))
	}}
}

// flagError names flag name in err. The stages' parsers were written for their flag and
// often name it already ("--reward \"x\": want …"); those are kept as they are.
func flagError(name string, err error) error {
	if err == nil || strings.HasPrefix(err.Error(), "--"+name) {
		return err
	}
	return fmt.Errorf("--%s: %w", name, err)
}
