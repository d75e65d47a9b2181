package app

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"
)

// ConfigFlag names a JSON file of flag values. Prepare adds it to every app.
var ConfigFlag = &cli.StringFlag{
	Name:     "config",
	Category: "Config",
	Usage:    "JSON `FILE` of flag values keyed by flag name, e.g. {\"seed\": 3}; flags and MEMPO_* variables override it, unknown keys are an error",
}

// withConfig applies the config file before action runs.
func withConfig(action cli.ActionFunc) cli.ActionFunc {
	return func(c *cli.Context) error {
		if err := applyConfig(c); err != nil {
			return err
		}
		return action(c)
	}
}

// applyConfig sets each flag named in the --config file that neither the command line
// nor the environment set. Keys are flag names; an unknown key is an error naming it
// (a typo must not silently fall back to a default).
func applyConfig(c *cli.Context) error {
	path := c.String(ConfigFlag.Name)
	if path == "" {
		return nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("config %s: %v: %w", path, err, ErrUsage)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var values map[string]any
	if err := dec.Decode(&values); err != nil {
		return fmt.Errorf("config %s: want one JSON object of flag values: %v: %w", path, err, ErrUsage)
	}
	flags := visibleFlags(c)
	keys := make([]string, 0, len(values))
	for k := range values {
		keys = append(keys, k)
	}
	sort.Strings(keys) // report the same unknown key on every run
	for _, key := range keys {
		if _, ok := flags[key]; !ok || key == ConfigFlag.Name {
			return fmt.Errorf("config %s: unknown key %q; keys are flag names: %s: %w",
				path, key, strings.Join(flagNames(flags), ", "), ErrUsage)
		}
		if c.IsSet(key) {
			continue // the flag or its MEMPO_* variable wins
		}
		strs, err := configStrings(values[key])
		if err != nil {
			return fmt.Errorf("config %s: key %q: %v: %w", path, key, err, ErrUsage)
		}
		for _, s := range strs {
			if err := c.Set(key, s); err != nil {
				return fmt.Errorf("config %s: key %q: %v: %w", path, key, err, ErrUsage)
			}
		}
	}
	return nil
}

// visibleFlags maps each flag name a command can read (its own and its parents') to
// the flag.
func visibleFlags(c *cli.Context) map[string]cli.Flag {
	flags := map[string]cli.Flag{}
	for _, ctx := range c.Lineage() {
		if ctx.Command == nil {
			continue
		}
		for _, f := range ctx.Command.Flags {
			for _, n := range f.Names() {
				if _, ok := flags[n]; !ok && n != "help" && n != "h" {
					flags[n] = f
				}
			}
		}
	}
	if c.App != nil {
		for _, f := range c.App.Flags {
			for _, n := range f.Names() {
				if _, ok := flags[n]; !ok && n != "help" && n != "h" {
					flags[n] = f
				}
			}
		}
	}
	return flags
}

func flagNames(flags map[string]cli.Flag) []string {
	var names []string
	for n := range flags {
		if n != ConfigFlag.Name {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	return names
}

// configStrings turns a JSON value into the strings a flag's Set accepts; a list sets
// a slice flag once per element.
func configStrings(v any) ([]string, error) {
	switch v := v.(type) {
	case nil:
		return nil, nil
	case string:
		return []string{v}, nil
	case json.Number:
		return []string{v.String()}, nil
	case bool:
		return []string{strconv.FormatBool(v)}, nil
	case []any:
		var out []string
		for _, e := range v {
			s, err := configStrings(e)
			if err != nil {
				return nil, err
			}
			if len(s) != 1 {
				return nil, fmt.Errorf("list element %v: want a string, number or bool", e)
			}
			out = append(out, s...)
		}
		return out, nil
	}
	return nil, fmt.Errorf("value %v: want a string, number, bool or list", v)
}
