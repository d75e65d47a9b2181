package app

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/urfave/cli/v2"

	"github.com/mempo/mempo/jobs"
)

func init() {
	// --version prints what `mempo version` prints, not urfave/cli's "NAME version V".
	cli.VersionPrinter = func(c *cli.Context) { WriteVersion(c.App.Writer, c.App) }
}

// unknown stands for what a build did not record.
const unknown = "unknown"

// Build is what a binary was built from, as the Go toolchain stamped it: go build in a
// git checkout records the commit in the build info's vcs.* settings (or, under
// -buildvcs=false, the Makefile's stamps stand in); go test, go run of files and builds
// outside a checkout record none, and those fields read "unknown".
type Build struct {
	Module   string // the main module and its version: "github.com/mempo/mempo (devel)" for a checkout
	Revision string // vcs.revision: the commit's full hash
	Modified string // vcs.modified: "true" when the tree had uncommitted changes, else "false"
	Time     string // vcs.time: the commit's time, RFC 3339
	Go       string // the toolchain and target: "go1.26.0 linux/amd64"
}

// The Makefile's stamps (-ldflags -X) of the same three fields, for builds in which Go
// records no vcs.* settings: GOFLAGS=-buildvcs=false, as some sandboxes set because
// their git cannot read the checkout. stampModified is "true" when tracked files differ
// from the commit.
var stampRevision, stampModified, stampTime string

// ReadBuild is this binary's Build: the vcs.* settings Go recorded, else the Makefile's
// stamps, else "unknown".
func ReadBuild() Build {
	return buildOf(debug.ReadBuildInfo()).orStamped(stampRevision, stampModified, stampTime)
}

func buildOf(bi *debug.BuildInfo, ok bool) Build {
	b := Build{Module: unknown, Revision: unknown, Modified: unknown, Time: unknown,
		Go: runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH}
	if !ok || bi == nil {
		return b
	}
	if bi.Main.Path != "" {
		b.Module = bi.Main.Path + " " + bi.Main.Version
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Revision = s.Value
		case "vcs.modified":
			b.Modified = s.Value
		case "vcs.time":
			b.Time = s.Value
		}
	}
	return b
}

// orStamped fills the VCS fields b lacks from the Makefile's stamps, when it set them.
func (b Build) orStamped(revision, modified, time string) Build {
	if b.Revision != unknown || revision == "" {
		return b
	}
	b.Revision, b.Modified, b.Time = revision, orUnknown(modified), orUnknown(time)
	return b
}

func orUnknown(s string) string {
	if s == "" {
		return unknown
	}
	return s
}

// Short is the revision's first 12 hex digits, with "-dirty" when the tree was
// modified, as the Makefile's REVISION spells it; "unknown" without a revision.
func (b Build) Short() string {
	if b.Revision == unknown {
		return unknown
	}
	rev := b.Revision[:min(12, len(b.Revision))]
	if b.Modified == "true" {
		rev += "-dirty"
	}
	return rev
}

// libtorchKey holds, in an app's Metadata, the libtorch WithLibtorch records.
const libtorchKey = "mempo/libtorch"

// libtorch is the libtorch a binary links: model/torch's Version and CUDABuilt.
type libtorch struct {
	version   func() string
	cudaBuilt func() bool
}

// WithLibtorch records on a that its binary links libtorch, so that --version names it:
// version and cudaBuilt are model/torch's Version and CUDABuilt, called only when the
// version is printed. This package stays pure Go; an app without it is a pure-Go
// binary's (mempo-score, mempo-advantage), which links no libtorch and says so.
func WithLibtorch(a *cli.App, version func() string, cudaBuilt func() bool) *cli.App {
	if a.Metadata == nil {
		a.Metadata = map[string]any{}
	}
	a.Metadata[libtorchKey] = libtorch{version: version, cudaBuilt: cudaBuilt}
	return a
}

// WriteVersion writes what --version and `mempo version` print for a: its name, short
// revision and libtorch on the first line (build/gpu_check/sections.sh reads
// "libtorch X.Y.Z" there), then one field a line. code is the code version the
// binary's outputs record in their manifests (jobs.CodeVersion); devices is what the
// libtorch build can run on.
func WriteVersion(w io.Writer, a *cli.App) {
	lt, _ := a.Metadata[libtorchKey].(libtorch)
	writeVersion(w, a.Name, ReadBuild(), jobs.CodeVersion(), lt)
}

func writeVersion(w io.Writer, name string, b Build, code string, lt libtorch) {
	linked, devices := "not linked (a pure-Go binary)", ""
	summary := "pure Go, no libtorch"
	if lt.version != nil {
		linked, devices = lt.version(), "cpu"
		if lt.cudaBuilt() {
			devices = "cpu, cuda"
		}
		summary = "libtorch " + linked + ", " + devices
	}
	fmt.Fprintf(w, "%s %s (%s)\n", name, b.Short(), summary)
	fmt.Fprintf(w, "module:   %s\n", b.Module)
	fmt.Fprintf(w, "revision: %s\n", b.Revision)
	fmt.Fprintf(w, "modified: %s\n", b.Modified)
	fmt.Fprintf(w, "time:     %s\n", b.Time)
	fmt.Fprintf(w, "code:     %s\n", code)
	fmt.Fprintf(w, "go:       %s\n", b.Go)
	fmt.Fprintf(w, "libtorch: %s\n", linked)
	if devices != "" {
		fmt.Fprintf(w, "devices:  %s\n", devices)
	}
}
