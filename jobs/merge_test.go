package jobs

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/mempo/mempo/format"
)

func runParts(t *testing.T, out string, n int, change func(i int, s *Spec)) {
	t.Helper()
	for i := range n {
		spec := testSpec(out)
		spec.Part = Part{Index: i, Count: n}
		if change != nil {
			change(i, &spec)
		}
		res := mustRun(t, spec, testWork(spec.Seed, counter{}))
		if want := filepath.Join(out, PartsDir, Part{i, n}.dir()); res.Dir != want {
			t.Fatalf("part %d/%d wrote %s, want %s", i, n, res.Dir, want)
		}
	}
}

func TestMergeEqualsUnsharded(t *testing.T) {
	whole := mustRun(t, testSpec(filepath.Join(t.TempDir(), "whole")), testWork(7, counter{}))
	for _, n := range []int{1, 2, 3, 5, 7} {
		t.Run(Part{0, n}.dir(), func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "out")
			runParts(t, out, n, nil)
			spec := testSpec(out)
			spec.Merge = n
			res := mustRun(t, spec, nil)
			if diff := cmp.Diff(whole.Manifest.Outputs, res.Manifest.Outputs); diff != "" {
				t.Errorf("merged outputs (-want +got):\n%s", diff)
			}
			if got, want := res.Manifest.Digest(), whole.Manifest.Digest(); got != want {
				t.Errorf("merged digest %s, want unsharded %s", got, want)
			}
			m, err := format.ReadManifest(out)
			if err != nil || m.CacheKey != whole.Key.String() {
				t.Fatalf("merged manifest key %v err %v, want unsharded key %s", m, err, whole.Key)
			}
			if m.Metrics["tokens"] != whole.Manifest.Metrics["tokens"] || m.Metrics["rows"] != whole.Manifest.Metrics["rows"] {
				t.Errorf("merged metrics %v, want tokens and rows of %v", m.Metrics, whole.Manifest.Metrics)
			}
			if diff := cmp.Diff(whole.Manifest.Timings.Phases, m.Timings.Phases); diff != "" {
				t.Errorf("merged phases (-unsharded +merged):\n%s", diff)
			}
			// The merged dataset is the unsharded output: an unsharded run hits it.
			calls := counter{}
			if res := mustRun(t, testSpec(out), testWork(7, calls)); !res.Hit || len(calls) != 0 {
				t.Errorf("unsharded run after merge: Hit %v computed %v, want a hit", res.Hit, calls.shards())
			}
		})
	}
}

func TestMergeRefusesIncompleteParts(t *testing.T) {
	tests := []struct {
		name   string
		setup  func(t *testing.T, out string)
		reason string
	}{
		{"missing part", func(t *testing.T, out string) {
			runParts(t, out, 3, nil)
			os.Remove(filepath.Join(out, PartsDir, "1-of-3", format.ManifestName))
		}, "part 1/3"},
		{"part from another seed", func(t *testing.T, out string) {
			runParts(t, out, 3, func(i int, s *Spec) {
				if i == 2 {
					s.Seed = 99
				}
			})
		}, "part 2/3"},
		{"corrupt shard", func(t *testing.T, out string) {
			runParts(t, out, 3, nil)
			path := filepath.Join(out, PartsDir, "0-of-3", "part-00000.parquet")
			b, _ := os.ReadFile(path)
			b[0] ^= 1
			os.WriteFile(path, b, 0o644)
		}, "0-of-3/part-00000.parquet"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "out")
			tt.setup(t, out)
			spec := testSpec(out)
			spec.Merge = 3
			_, err := Run(context.Background(), spec, nil)
			if err == nil || !strings.Contains(err.Error(), tt.reason) {
				t.Fatalf("Merge = %v, want an error naming %s", err, tt.reason)
			}
			if tt.name != "corrupt shard" && !errors.Is(err, ErrIncomplete) {
				t.Errorf("Merge = %v, want ErrIncomplete", err)
			}
			if tt.name == "corrupt shard" && !errors.Is(err, format.ErrCorrupt) {
				t.Errorf("Merge = %v, want format.ErrCorrupt", err)
			}
			if _, err := format.ReadManifest(out); err == nil {
				t.Errorf("a failed merge left a manifest in %s", out)
			}
		})
	}
}
