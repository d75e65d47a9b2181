package app

import (
	"bytes"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/mempo/mempo/jobs"
)

func TestBuildOf(t *testing.T) {
	main := debug.Module{Path: "github.com/mempo/mempo", Version: "(devel)"}
	stamped := func(settings ...debug.BuildSetting) *debug.BuildInfo {
		return &debug.BuildInfo{Main: main, Settings: settings}
	}
	rev := debug.BuildSetting{Key: "vcs.revision", Value: "40cd7f2851ad0123456789abcdef0123456789ab"}
	tests := []struct {
		name      string
		bi        *debug.BuildInfo
		ok        bool
		want      Build
		wantShort string
	}{
		{"clean checkout", stamped(rev, debug.BuildSetting{Key: "vcs.modified", Value: "false"},
			debug.BuildSetting{Key: "vcs.time", Value: "2026-12-04T23:00:00Z"}), true,
			Build{Module: "github.com/mempo/mempo (devel)", Revision: rev.Value, Modified: "false", Time: "2026-12-04T23:00:00Z"},
			"40cd7f2851ad"},
		{"modified tree", stamped(rev, debug.BuildSetting{Key: "vcs.modified", Value: "true"}), true,
			Build{Module: "github.com/mempo/mempo (devel)", Revision: rev.Value, Modified: "true", Time: unknown},
			"40cd7f2851ad-dirty"},
		{"no VCS stamp (go test)", stamped(debug.BuildSetting{Key: "-compiler", Value: "gc"}), true,
			Build{Module: "github.com/mempo/mempo (devel)", Revision: unknown, Modified: unknown, Time: unknown},
			unknown},
		{"no build info", nil, false,
			Build{Module: unknown, Revision: unknown, Modified: unknown, Time: unknown}, unknown},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := buildOf(tt.bi, tt.ok)
			if got.Go == "" {
				t.Errorf("buildOf(...).Go is empty, want the toolchain and target")
			}
			got.Go = ""
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("buildOf (-want +got):\n%s", diff)
			}
			if s := got.Short(); s != tt.wantShort {
				t.Errorf("Short() = %q, want %q", s, tt.wantShort)
			}
		})
	}
}

// TestOrStamped: the Makefile's stamps stand in only for the vcs.* settings Go did not record.
func TestOrStamped(t *testing.T) {
	goStamped := Build{Revision: "40cd7f2851ad0123", Modified: "false", Time: "2026-12-04T23:00:00Z"}
	none := Build{Revision: unknown, Modified: unknown, Time: unknown}
	tests := []struct {
		name                     string
		b                        Build
		revision, modified, time string
		want                     Build
	}{
		{"Go's settings win", goStamped, "ffff", "true", "2027-01-01T00:00:00Z", goStamped},
		{"stamps fill a build without them", none, "ffff", "true", "2027-01-01T00:00:00Z",
			Build{Revision: "ffff", Modified: "true", Time: "2027-01-01T00:00:00Z"}},
		{"no stamps", none, "", "", "", none},
		{"a revision without a time", none, "ffff", "false", "", Build{Revision: "ffff", Modified: "false", Time: unknown}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.b.orStamped(tt.revision, tt.modified, tt.time)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("orStamped(%q, %q, %q) (-want +got):\n%s", tt.revision, tt.modified, tt.time, diff)
			}
		})
	}
}

// TestVersionFlag: --version on a stage's app exits 0 before its required flags are
// checked, and prints every field; the libtorch lines only when the binary links it.
func TestVersionFlag(t *testing.T) {
	tests := []struct {
		name     string
		libtorch bool
		want     []string
		notWant  []string
	}{
		{"pure Go", false,
			[]string{"mempo-test " + ReadBuild().Short() + " (pure Go, no libtorch)\n", "libtorch: not linked"},
			[]string{"devices:"}},
		{"libtorch", true,
			[]string{"(libtorch 9.9.9, cpu, cuda)\n", "libtorch: 9.9.9\n", "devices:  cpu, cuda\n"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var spec jobs.Spec
			var rows int
			a, stdout, stderr := testApp(&spec, &rows, nil)
			if tt.libtorch {
				WithLibtorch(a, func() string { return "9.9.9" }, func() bool { return true })
			}
			if code := Main(a, []string{"mempo-test", "--version"}); code != ExitOK {
				t.Fatalf("mempo-test --version = exit %d, stderr %q; want 0", code, stderr)
			}
			got := stdout.String()
			fields := []string{"module:   ", "revision: ", "modified: ", "time:     ", "code:     " + jobs.CodeVersion() + "\n", "go:       go"}
			for _, want := range append(fields, tt.want...) {
				if !strings.Contains(got, want) {
					t.Errorf("mempo-test --version lacks %q:\n%s", want, got)
				}
			}
			for _, bad := range tt.notWant {
				if strings.Contains(got, bad) {
					t.Errorf("mempo-test --version has %q:\n%s", bad, got)
				}
			}
		})
	}
}

// TestVersionLine: the first line names libtorch as build/gpu_check/sections.sh greps it.
func TestVersionLine(t *testing.T) {
	var b bytes.Buffer
	lt := libtorch{version: func() string { return "2.11.0" }, cudaBuilt: func() bool { return false }}
	writeVersion(&b, "mempo", Build{Revision: "40cd7f2851ad0123", Modified: "false"}, "code", lt)
	first, _, _ := strings.Cut(b.String(), "\n")
	if want := "mempo 40cd7f2851ad (libtorch 2.11.0, cpu)"; first != want {
		t.Errorf("first line = %q, want %q", first, want)
	}
	if n := strings.Count(b.String(), "libtorch 2.11."); n != 1 {
		t.Errorf("%q appears %d times, want once (on the first line):\n%s", "libtorch 2.11.", n, b.String())
	}
}
