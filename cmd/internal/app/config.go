package app

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"
)

// ConfigFlag names a JSON file of settings. Prepare adds it to every app.
var ConfigFlag = &cli.StringFlag{
	Name:     "config",
	Category: "Config",
	Usage: "JSON `FILE` of settings keyed by flag name, e.g. {\"seed\": 3}, or by the stage config's field names as a manifest or trainer_state.json records them, " +
		"e.g. {\"objective\": {\"clip\": {\"clip_low\": 0.1}}}; flags and MEMPO_* variables override it, unknown keys are an error",
}

// applyConfig applies the --config file of c to what neither the command line nor the
// environment set. A key is either a flag name ("clip-low": 0.1), set as that flag, or
// a JSON field name of the command's stage config as the stage records it in manifests
// and trainer_state.json ("objective": {"clip": {"clip_low": 0.1}}), decoded into config
// over its defaults; so the config object of a manifest replays the run's settings,
// including fields no flag sets. A key that is both ("temperature") is read as the flag,
// unless its value is a JSON object ("protocol": a recorded description, not a file
// name). An unknown key, at any depth, is an error naming it: a typo must not silently
// fall back to a default.
func applyConfig(c *cli.Context, config any) error {
	path := c.String(ConfigFlag.Name)
	if path == "" {
		return nil
	}
	values, err := readConfig(path)
	if err != nil {
		return err
	}
	flags := visibleFlags(c)
	delete(flags, ConfigFlag.Name) // a config file does not name another
	fields := jsonFields(config)
	keys := make([]string, 0, len(values))
	for k := range values {
		keys = append(keys, k)
	}
	sort.Strings(keys) // report the same unknown key on every run
	for _, key := range keys {
		raw := values[key]
		_, isFlag := flags[key]
		switch {
		case isFlag && !(fields[key] && isObject(raw)):
			err = setFlag(c, key, raw)
		case fields[key]:
			err = decodeField(config, key, raw)
		default:
			return fmt.Errorf("config %s: unknown key %q; keys are flag names (%s)%s: %w",
				path, key, strings.Join(sortedNames(flags), ", "), fieldList(fields), ErrUsage)
		}
		if err != nil {
			return fmt.Errorf("config %s: key %q: %w: %w", path, key, err, ErrUsage)
		}
	}
	return nil
}

// readConfig reads the config file: one JSON object.
func readConfig(path string) (map[string]json.RawMessage, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w: %w", path, err, ErrUsage)
	}
	var values map[string]json.RawMessage
	if err := json.NewDecoder(bytes.NewReader(data)).Decode(&values); err != nil || values == nil {
		if err == nil {
			err = fmt.Errorf("got null")
		}
		return nil, fmt.Errorf("config %s: want one JSON object of settings: %w: %w", path, err, ErrUsage)
	}
	return values, nil
}

// setFlag sets flag key from its JSON value unless the command line or the environment
// set it already.
func setFlag(c *cli.Context, key string, raw json.RawMessage) error {
	if c.IsSet(key) {
		return nil // the flag or its MEMPO_* variable wins
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return err
	}
	strs, err := configStrings(v)
	if err != nil {
		return err
	}
	for _, s := range strs {
		if err := c.Set(key, s); err != nil {
			return err
		}
	}
	return nil
}

// decodeField decodes one top-level field of the stage config, refusing unknown nested
// keys as the top level refuses unknown keys.
func decodeField(config any, key string, raw json.RawMessage) error {
	obj, err := json.Marshal(map[string]json.RawMessage{key: raw})
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(obj))
	dec.DisallowUnknownFields()
	return dec.Decode(config)
}

func isObject(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) > 0 && t[0] == '{'
}

// jsonFields lists the top-level JSON names of the struct config points at, as
// encoding/json names them: the tag's name, else the field's; fields of an untagged
// embedded struct are promoted. nil has none.
func jsonFields(config any) map[string]bool {
	fields := map[string]bool{}
	if config == nil {
		return fields
	}
	var walk func(t reflect.Type)
	walk = func(t reflect.Type) {
		for i := range t.NumField() {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			switch {
			case name == "-":
			case name == "" && f.Anonymous && f.Type.Kind() == reflect.Struct:
				walk(f.Type)
			case !f.IsExported():
			case name == "":
				fields[f.Name] = true
			default:
				fields[name] = true
			}
		}
	}
	walk(reflect.TypeOf(config).Elem())
	return fields
}

// fieldList describes the config's field names for the unknown-key error.
func fieldList(fields map[string]bool) string {
	if len(fields) == 0 {
		return ""
	}
	return " or the stage config's fields (" + strings.Join(sortedNames(fields), ", ") + ")"
}

// sortedNames returns the keys of m in order.
func sortedNames[V any](m map[string]V) []string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
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
