// Command k8svalidate validates Kubernetes manifests offline with kubeconform, strictly:
// a field that the schema does not define (a misspelling), a value of the wrong type or a
// missing required field fails, for the built-in kinds and for the custom resources
// mempo's manifests use (Argo's Workflow, Kubeflow's PyTorchJob).
//
//	go run . [-schemas DIR] FILE...   (FILE "-" reads standard input)
//
// The schemas come from pinned Go modules, fetched with `go mod download` and checked
// against the h1: digests below: the OpenAPI v3 documents the API server publishes
// (k8s.io/kubernetes, api/openapi-spec/v3) and the CRDs' openAPIV3Schema (Argo's full
// CRDs, the training operator's). They are converted once into kubeconform's layout, one
// standalone JSON schema a kind with additionalProperties false wherever the API has a
// fixed set of fields, and kept in DIR (default: a directory named by the pins under the
// user's cache). Exit status: 0 every resource valid, 1 one is not (or a schema is
// missing), 2 usage, 3 the module proxy could not be reached.
package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	"github.com/yannh/kubeconform/pkg/validator"
	"sigs.k8s.io/yaml"
)

// source is a pinned module and the schema files it holds.
type source struct {
	module, version, sum string
	openapi              []string // OpenAPI v3 documents of built-in API groups
	crds                 []string // CustomResourceDefinitions
}

var sources = []source{
	{module: "k8s.io/kubernetes", version: "v1.36.3", sum: "h1:qDQdoMiluAE2Eab6Fa52YV+WjiGz9mZFFoagEA6cI+o=",
		openapi: []string{
			"api/openapi-spec/v3/api__v1_openapi.json",
			"api/openapi-spec/v3/apis__apps__v1_openapi.json",
			"api/openapi-spec/v3/apis__batch__v1_openapi.json",
			"api/openapi-spec/v3/apis__rbac.authorization.k8s.io__v1_openapi.json",
		}},
	// Argo Workflows' full CRDs (with the schema; the minimal ones accept anything). Only
	// this YAML is read from the module: none of its code is built.
	{module: "github.com/argoproj/argo-workflows/v4", version: "v4.0.5", sum: "h1:/1lru5oXUd+k6KEDUps6rLX5OKfi1jTfabgXTly/VFU=",
		crds: []string{"manifests/base/crds/full/argoproj.io_workflows.yaml"}},
	{module: "github.com/kubeflow/training-operator", version: "v1.8.1", sum: "h1:mVvoBSCInbMBX0gGSn4+Ihj3ycwoLO1iEAw+0qPhQfc=",
		crds: []string{"manifests/base/crds/kubeflow.org_pytorchjobs.yaml"}},
}

// converterVersion changes whenever the conversion does, so that cached schemas are remade.
const converterVersion = "2"

// errUnreachable marks a module that could not be downloaded.
var errUnreachable = errors.New("module proxy unreachable")

func main() {
	schemas := flag.String("schemas", "", "directory of converted schemas (default: under the user cache directory)")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: k8svalidate [-schemas DIR] FILE...\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	dir := *schemas
	if dir == "" {
		dir = defaultDir()
	}
	if err := ensureSchemas(dir); err != nil {
		fmt.Fprintln(os.Stderr, "k8svalidate:", err)
		if errors.Is(err, errUnreachable) {
			os.Exit(3)
		}
		os.Exit(1)
	}
	os.Exit(validate(dir, flag.Args()))
}

// defaultDir is the cache directory named by the pins, shared by every clone.
func defaultDir() string {
	root := os.Getenv("MEMPO_CACHE")
	if root == "" {
		c, err := os.UserCacheDir()
		if err != nil {
			c = os.TempDir()
		}
		root = filepath.Join(c, "mempo")
	}
	h := sha256.New()
	fmt.Fprintln(h, converterVersion)
	for _, s := range sources {
		fmt.Fprintln(h, s.module, s.version, s.sum, s.openapi, s.crds)
	}
	return filepath.Join(root, "k8s-schemas-"+hex.EncodeToString(h.Sum(nil))[:12])
}

// ensureSchemas converts the pinned sources into dir unless it is complete already.
func ensureSchemas(dir string) error {
	if _, err := os.Stat(filepath.Join(dir, ".complete")); err == nil {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), ".k8s-schemas-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	for _, s := range sources {
		root, err := download(s)
		if err != nil {
			return err
		}
		for _, f := range s.openapi {
			if err := convertOpenAPI(filepath.Join(root, f), tmp); err != nil {
				return fmt.Errorf("%s@%s: %s: %w", s.module, s.version, f, err)
			}
		}
		for _, f := range s.crds {
			if err := convertCRD(filepath.Join(root, f), tmp); err != nil {
				return fmt.Errorf("%s@%s: %s: %w", s.module, s.version, f, err)
			}
		}
	}
	if err := os.WriteFile(filepath.Join(tmp, ".complete"), []byte(converterVersion+"\n"), 0o644); err != nil {
		return err
	}
	os.RemoveAll(dir)
	return os.Rename(tmp, dir)
}

// download fetches a pinned module with the go command and checks its digest.
func download(s source) (string, error) {
	cmd := exec.Command("go", "mod", "download", "-json", s.module+"@"+s.version)
	cmd.Dir = os.TempDir() // outside any module: only the named one is fetched
	out, err := cmd.Output()
	var info struct{ Dir, Sum, Error string }
	if jerr := json.Unmarshal(out, &info); jerr != nil || info.Error != "" || err != nil {
		msg := info.Error
		if msg == "" {
			msg = fmt.Sprint(err)
			if ee, ok := err.(*exec.ExitError); ok {
				msg += ": " + strings.TrimSpace(string(ee.Stderr))
			}
		}
		return "", fmt.Errorf("go mod download %s@%s: %s: %w", s.module, s.version, msg, errUnreachable)
	}
	if info.Sum != s.sum {
		return "", fmt.Errorf("%s@%s: digest %s, pinned %s: a changed module or a corrupt cache", s.module, s.version, info.Sum, s.sum)
	}
	return info.Dir, nil
}

// gvk is a kind's group, version and name as the API names them.
type gvk struct{ Group, Version, Kind string }

// fileName is kubeconform's {{.ResourceKind}}{{.KindSuffix}}.json for the kind.
func (k gvk) fileName() string {
	suffix := ""
	if k.Group != "" {
		suffix = "-" + strings.ToLower(strings.Split(k.Group, ".")[0])
	}
	return strings.ToLower(k.Kind) + suffix + "-" + strings.ToLower(k.Version) + ".json"
}

// convertOpenAPI writes one schema for each kind an OpenAPI v3 document defines: the
// kind's component with every component it references under $defs.
func convertOpenAPI(path, dir string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var doc struct {
		Components struct {
			Schemas map[string]map[string]any `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		return err
	}
	all := doc.Components.Schemas
	names := make([]string, 0, len(all))
	for n := range all {
		names = append(names, n)
	}
	sort.Strings(names)
	written := 0
	for _, name := range names {
		s := all[name]
		kinds, _ := s["x-kubernetes-group-version-kind"].([]any)
		if len(kinds) != 1 || s["properties"] == nil {
			continue // list kinds and options named for several versions are not manifests
		}
		k, _ := kinds[0].(map[string]any)
		id := gvk{Group: str(k["group"]), Version: str(k["version"]), Kind: str(k["kind"])}
		if strings.HasSuffix(id.Kind, "List") {
			continue
		}
		defs := map[string]any{}
		collect(all, s, defs)
		out := map[string]any{"$schema": "https://json-schema.org/draft/2020-12/schema", "$defs": defs}
		for key, v := range s {
			out[key] = v
		}
		out = strictify(rewriteRefs(out)).(map[string]any)
		if err := writeJSON(filepath.Join(dir, id.fileName()), out); err != nil {
			return err
		}
		written++
	}
	if written == 0 {
		return errors.New("no kind defined")
	}
	return nil
}

// collect adds to defs every component v references, transitively.
func collect(all map[string]map[string]any, v any, defs map[string]any) {
	switch v := v.(type) {
	case map[string]any:
		if ref, ok := v["$ref"].(string); ok {
			name := strings.TrimPrefix(ref, "#/components/schemas/")
			if _, seen := defs[name]; !seen {
				if s, ok := all[name]; ok {
					defs[name] = s
					collect(all, s, defs)
				}
			}
		}
		for _, x := range v {
			collect(all, x, defs)
		}
	case []any:
		for _, x := range v {
			collect(all, x, defs)
		}
	}
}

// rewriteRefs points OpenAPI's component references at the schema's own $defs, and
// turns the API's allOf of one reference (OpenAPI 3.0's way to give a reference siblings)
// into the reference itself, so that an error names the field, not the allOf.
func rewriteRefs(v any) any {
	switch v := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(v))
		if all, ok := v["allOf"].([]any); ok && len(all) == 1 {
			if ref, ok := all[0].(map[string]any); ok && len(ref) == 1 && ref["$ref"] != nil {
				v = maps.Clone(v)
				delete(v, "allOf")
				v["$ref"] = ref["$ref"]
			}
		}
		for k, x := range v {
			if s, ok := x.(string); ok && k == "$ref" {
				out[k] = "#/$defs/" + strings.TrimPrefix(s, "#/components/schemas/")
				continue
			}
			out[k] = rewriteRefs(x)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = rewriteRefs(x)
		}
		return out
	}
	return v
}

// strictify closes every object schema that lists its properties: a field it does not
// list is refused. Schemas that keep unknown fields on purpose
// (x-kubernetes-preserve-unknown-fields) or that say what other fields may hold
// (additionalProperties) stay as they are.
func strictify(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if k == "properties" || k == "$defs" || k == "patternProperties" {
				if m, ok := x.(map[string]any); ok {
					for name, p := range m {
						m[name] = strictify(p)
					}
				}
				continue
			}
			v[k] = strictify(x)
		}
		_, props := v["properties"].(map[string]any)
		_, extra := v["additionalProperties"]
		if props && !extra && v["x-kubernetes-preserve-unknown-fields"] != true {
			v["additionalProperties"] = false
		}
		return v
	case []any:
		for i, x := range v {
			v[i] = strictify(x)
		}
	}
	return v
}

// convertCRD writes one schema for each served version of a CustomResourceDefinition.
func convertCRD(path, dir string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var crd struct {
		Kind string `json:"kind"`
		Spec struct {
			Group string `json:"group"`
			Names struct {
				Kind string `json:"kind"`
			} `json:"names"`
			Versions []struct {
				Name   string `json:"name"`
				Served bool   `json:"served"`
				Schema struct {
					OpenAPIV3Schema map[string]any `json:"openAPIV3Schema"`
				} `json:"schema"`
			} `json:"versions"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(data, &crd); err != nil {
		return err
	}
	if crd.Kind != "CustomResourceDefinition" {
		return fmt.Errorf("kind %q, want CustomResourceDefinition", crd.Kind)
	}
	written := 0
	for _, v := range crd.Spec.Versions {
		s := v.Schema.OpenAPIV3Schema
		if !v.Served || s == nil {
			continue
		}
		// The API server validates metadata itself; the CRD schema says only "object".
		if props, ok := s["properties"].(map[string]any); ok {
			props["metadata"] = map[string]any{"type": "object"}
		}
		s["$schema"] = "https://json-schema.org/draft/2020-12/schema"
		id := gvk{Group: crd.Spec.Group, Version: v.Name, Kind: crd.Spec.Names.Kind}
		if err := writeJSON(filepath.Join(dir, id.fileName()), strictify(s)); err != nil {
			return err
		}
		written++
	}
	if written == 0 {
		return errors.New("no served version with a schema")
	}
	return nil
}

func writeJSON(path string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o644)
}

func str(v any) string { s, _ := v.(string); return s }

// validate runs kubeconform over the files, prints one line a resource and returns the
// exit status.
func validate(dir string, files []string) int {
	v, err := validator.New([]string{filepath.Join(dir, "{{.ResourceKind}}{{.KindSuffix}}.json")},
		validator.Opts{Strict: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, "k8svalidate:", err)
		return 1
	}
	status := 0
	for _, f := range files {
		var r io.ReadCloser
		if f == "-" {
			data, err := io.ReadAll(os.Stdin)
			if err != nil {
				fmt.Fprintln(os.Stderr, "k8svalidate:", err)
				return 1
			}
			r = io.NopCloser(bytes.NewReader(data))
		} else {
			fh, err := os.Open(f)
			if err != nil {
				fmt.Fprintln(os.Stderr, "k8svalidate:", err)
				return 1
			}
			r = fh
		}
		n := 0
		for _, res := range v.Validate(f, r) {
			sig, _ := res.Resource.Signature()
			name := f
			if sig != nil {
				name = fmt.Sprintf("%s: %s %s/%s", f, sig.Kind, sig.Version, sig.Name)
			}
			switch res.Status {
			case validator.Valid:
				n++
				fmt.Printf("valid   %s\n", name)
			case validator.Empty:
			case validator.Invalid:
				status = 1
				// kubeconform lists the first level of causes; the error holds the tree,
				// whose leaves name the field at fault.
				fmt.Printf("INVALID %s\n", name)
				if res.Err != nil {
					for _, at := range strings.Split(res.Err.Error(), " - at ")[1:] {
						fmt.Printf("        at %s\n", strings.TrimSpace(at))
					}
				}
			default: // an error, a missing schema or a skipped kind: not validated
				status = 1
				fmt.Printf("ERROR   %s: %v\n", name, res.Err)
			}
		}
		if n == 0 && status == 0 {
			fmt.Printf("ERROR   %s: no resource\n", f)
			status = 1
		}
	}
	return status
}
