package jobs

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"io"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"

	"github.com/mempo/mempo/format"
)

// revision is the VCS revision the binary was built from. The Makefile sets it with
// -ldflags "-X github.com/mempo/mempo/jobs.revision=<short rev>[-dirty]".
var revision = "dev"

// Key is a stage's cache key: the sha256 of the labeled lines that name everything its
// output depends on (the scheme of cmd/go/internal/cache/hash.go).
type Key [32]byte

// String is the key in hex, as stored in the manifest's cache_key.
func (k Key) String() string { return hex.EncodeToString(k[:]) }

// Short is the key's first 12 hex digits; it names temp directories.
func (k Key) Short() string { return k.String()[:12] }

// Hash accumulates a key's preimage line by line. When debug is not nil every line is
// echoed to it as written, so "why did this rerun?" is answered by diffing two preimages.
// Keys are built only through KeySpec, so every output is keyed the same way.
type Hash struct {
	name  string
	h     hash.Hash
	debug io.Writer
}

// newHash starts a preimage called name (it labels debug output only).
func newHash(name string, debug io.Writer) *Hash {
	return &Hash{name: name, h: sha256.New(), debug: debug}
}

// Line adds one line: the label, then each field separated by one space. A field that
// is empty or holds a space, quote or control character is quoted so lines stay
// unambiguous whatever a path contains.
func (h *Hash) Line(label string, fields ...string) {
	var b strings.Builder
	b.WriteString(label)
	for _, f := range fields {
		b.WriteByte(' ')
		if f == "" || strings.ContainsRune(f, ' ') || strconv.Quote(f) != `"`+f+`"` {
			f = strconv.Quote(f)
		}
		b.WriteString(f)
	}
	b.WriteByte('\n')
	line := b.String()
	h.h.Write([]byte(line))
	if h.debug != nil {
		fmt.Fprintf(h.debug, "HASH[%s]: %q\n", h.name, line)
	}
}

// Sum returns the key of the lines written so far.
func (h *Hash) Sum() Key {
	var k Key
	h.h.Sum(k[:0])
	if h.debug != nil {
		fmt.Fprintf(h.debug, "HASH[%s] = %s\n", h.name, k)
	}
	return k
}

var codeVersion = sync.OnceValue(computeCodeVersion)

// CodeVersion names the code that computed an output: module version and VCS revision.
// A build without a stamped revision ("dev", e.g. go test or go run) names itself by
// the sha256 of its own executable instead, so editing the code can never reuse an
// output the old code wrote; Go builds are reproducible, so the same source still hits.
func CodeVersion() string { return codeVersion() }

func computeCodeVersion() string {
	mod, rev, dirty := "(devel)", revision, ""
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Version != "" {
			mod = bi.Main.Version
		}
		if rev == "dev" {
			for _, s := range bi.Settings {
				switch {
				case s.Key == "vcs.revision" && len(s.Value) >= 12:
					rev = s.Value[:12]
				case s.Key == "vcs.modified" && s.Value == "true":
					dirty = "-dirty"
				}
			}
		}
	}
	// An uncommitted build's revision does not name its code: add the binary's digest.
	if rev == "dev" || dirty != "" || strings.HasSuffix(rev, "-dirty") {
		if sum, err := executableDigest(); err == nil {
			rev += "+exe." + sum
		}
	}
	return mod + "@" + rev + dirty
}

func executableDigest() (string, error) {
	path, err := os.Executable()
	if err != nil {
		return "", err
	}
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil))[:12], nil
}

// CanonicalJSON encodes v as compact JSON with object keys sorted, so two configs that
// differ only in field or map order get the same bytes, the same key and the same manifest.
func CanonicalJSON(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var tree any
	if err := d.Decode(&tree); err != nil {
		return nil, err
	}
	return json.Marshal(tree)
}

// KeySpec names everything an output depends on, for its cache key: datasets and
// checkpoints alike are keyed by it, so the same change invalidates both the same way.
type KeySpec struct {
	Stage string
	// Code is the code version keyed; "" keys this binary's (CodeVersion). A step whose
	// output a format version of its own determines (the search index: its analysis and
	// index format) keys that instead, so a new binary keeps what it built.
	Code string
	// Schema names the output's kind and layout version, e.g. "rollouts@2" or
	// CheckpointSchema.
	Schema string
	// Config is the canonical JSON (CanonicalJSON) of the stage's resolved config; it is
	// keyed by its sha256.
	Config []byte
	// Inputs are keyed by name and digest, never by path: moving an input is no change,
	// and a moved dataset stays a cache hit. A stage whose output depends on a file's
	// name keys that name in its config (the import's stems).
	Inputs []format.Input
	Seed   int64
}

// Key returns the cache key of s; debug, when not nil, receives its preimage.
func (s KeySpec) Key(debug io.Writer) Key { return s.hash(debug).Sum() }

// hash writes the lines every key shares — stage, code version, schema, config digest,
// one line per input, seed on its own line — and returns the hash for callers that add
// lines of their own (a dataset's shard plan and part).
func (s KeySpec) hash(debug io.Writer) *Hash {
	h := newHash("stage "+s.Stage, debug)
	h.Line("stage", s.Stage)
	code := s.Code
	if code == "" {
		code = CodeVersion()
	}
	h.Line("code", code)
	h.Line("schema", s.Schema)
	sum := sha256.Sum256(s.Config)
	h.Line("config", hex.EncodeToString(sum[:]))
	for _, in := range s.Inputs {
		h.Line("input", in.Name, in.Digest)
	}
	h.Line("seed", strconv.FormatInt(s.Seed, 10))
	return h
}

// key computes the cache key of spec's output: KeySpec's lines, then the size of the
// shard plan and, for a part run, the part.
func (r *runner) key(part Part) Key {
	h := KeySpec{
		Stage:  r.spec.Stage,
		Schema: fmt.Sprintf("%s@%d", r.spec.Kind, r.spec.SchemaVersion),
		Config: r.config,
		Inputs: r.spec.Inputs,
		Seed:   r.spec.Seed,
	}.hash(r.spec.KeyDebug)
	h.Line("shards", strconv.Itoa(r.spec.Shards))
	if !part.Whole() {
		h.Line("part", part.String())
	}
	return h.Sum()
}
