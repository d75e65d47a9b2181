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
type Hash struct {
	name  string
	h     hash.Hash
	debug io.Writer
}

// NewHash starts a preimage called name (it labels debug output only).
func NewHash(name string, debug io.Writer) *Hash {
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

// key computes the cache key of spec's output; part selects a part run's key, the whole
// plan when zero.
func (r *runner) key(part Part) Key {
	h := NewHash("stage "+r.spec.Stage, r.spec.KeyDebug)
	h.Line("stage", r.spec.Stage)
	h.Line("code", r.code)
	h.Line("schema", fmt.Sprintf("%s@%d", r.spec.Kind, r.spec.SchemaVersion))
	sum := sha256.Sum256(r.config)
	h.Line("config", hex.EncodeToString(sum[:]))
	for _, in := range r.spec.Inputs {
		h.Line("input", in.Name, in.Path, in.Digest)
	}
	h.Line("seed", strconv.FormatInt(r.spec.Seed, 10))
	h.Line("shards", strconv.Itoa(r.spec.Shards))
	if !part.Whole() {
		h.Line("part", part.String())
	}
	return h.Sum()
}
