package jobs

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/mempo/mempo/format"
	"github.com/mempo/mempo/internal/tensorboard"
)

// boardScalars reads every event file of dir: tag → step → value, and the file names.
func boardScalars(t *testing.T, dir string) (map[string]map[int64]float32, []string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]map[int64]float32{}
	var names []string
	for _, e := range ents {
		if !tensorboard.IsEventFile(e.Name()) {
			t.Errorf("%s: a file other than an event file in the log dir", e.Name())
			continue
		}
		names = append(names, e.Name())
		evs, err := tensorboard.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) == 0 || evs[0].FileVersion != tensorboard.FileVersion {
			t.Errorf("%s: first event %+v, want file version %s", e.Name(), evs, tensorboard.FileVersion)
		}
		for _, ev := range evs {
			for _, v := range ev.Values {
				if got[v.Tag] == nil {
					got[v.Tag] = map[int64]float32{}
				}
				got[v.Tag][ev.Step] = v.Value
			}
		}
	}
	sort.Strings(names)
	return got, names
}

// manifestScalars is what a dataset's manifest metrics look like in the log at step.
func manifestScalars(stage string, step int64, metrics map[string]float64) map[string]map[int64]float32 {
	want := map[string]map[int64]float32{}
	for k, v := range metrics {
		want[stage+"/"+k] = map[int64]float32{step: float32(v)}
	}
	return want
}

// TestBoardDataset: a computed dataset's manifest metrics, its stage's summary
// included, go to the log at the Board's step; a cache hit adds a file only when the log
// has none of that stage, step and key; the Board is not keyed; a part logs nothing and
// its merge logs the merged output.
func TestBoardDataset(t *testing.T) {
	dir := t.TempDir()
	tb := filepath.Join(dir, "tb")
	out := filepath.Join(dir, "out")
	spec := testSpec(out)
	spec.Summarize = func(string, []format.Output) (map[string]float64, error) {
		return map[string]float64{"reward_mean": 0.25}, nil
	}
	plain := mustRun(t, spec, testWork(7, counter{})) // no Board: nothing logged
	spec.Board = Board{Dir: tb, Step: 3}
	res := mustRun(t, spec, testWork(7, counter{}))
	if !res.Hit || res.Key != plain.Key {
		t.Fatalf("Run with a Board: hit %v, key %s; want a hit of key %s (the Board is not keyed)", res.Hit, res.Key.Short(), plain.Key.Short())
	}
	got, names := boardScalars(t, tb)
	if diff := cmp.Diff(manifestScalars("test", 3, res.Manifest.Metrics), got); diff != "" {
		t.Errorf("log after a hit into a new log dir (-want +got):\n%s", diff)
	}
	if _, ok := got["test/reward_mean"]; !ok || len(names) != 1 {
		t.Errorf("log files %v, tags %v; want one file with test/reward_mean", names, got)
	}
	if !strings.HasSuffix(names[0], ".test.3."+res.Key.Short()) {
		t.Errorf("event file %s, want its name to end in .test.3.%s", names[0], res.Key.Short())
	}

	mustRun(t, spec, testWork(7, counter{}))
	if _, again := boardScalars(t, tb); len(again) != 1 {
		t.Errorf("log files after a second hit at the same step: %v, want only %s", again, names[0])
	}
	spec.Board.Step = 4
	mustRun(t, spec, testWork(7, counter{}))
	if got, names := boardScalars(t, tb); len(names) != 2 || len(got["test/rows"]) != 2 {
		t.Errorf("log after a hit at step 4: files %v, test/rows %v; want a second file and steps 3 and 4", names, got["test/rows"])
	}

	spec.Force = true
	spec.Board.Step = 5
	forced := mustRun(t, spec, testWork(7, counter{}))
	got, _ = boardScalars(t, tb)
	if forced.Hit || got["test/timing_s"][5] != float32(forced.Manifest.Metrics["timing_s"]) {
		t.Errorf("forced run: hit %v, logged timing_s %v; want a computed run's %v at step 5", forced.Hit, got["test/timing_s"], forced.Manifest.Metrics["timing_s"])
	}

	parts := filepath.Join(dir, "parts")
	ptb := filepath.Join(dir, "parts-tb")
	pspec := testSpec(parts)
	pspec.Board = Board{Dir: ptb, Step: 1}
	for i := range 2 {
		pspec.Part = Part{Index: i, Count: 2}
		mustRun(t, pspec, testWork(7, counter{}))
	}
	if _, err := os.Stat(ptb); !os.IsNotExist(err) {
		t.Errorf("Stat(%s) after the parts = %v, want no log: a part logs nothing", ptb, err)
	}
	pspec.Part, pspec.Merge = Part{}, 2
	merged := mustRun(t, pspec, nil)
	if got, _ := boardScalars(t, ptb); !cmp.Equal(got, manifestScalars("test", 1, merged.Manifest.Metrics)) {
		t.Errorf("log after the merge = %v, want the merged manifest's metrics %v", got, merged.Manifest.Metrics)
	}
}

// TestBoardCheckpoint: a published checkpoint logs its trainer state's metrics at the
// Board's step and each per-step line of its metrics file at that line's optimizer
// step; a hit logs them only into a log without them; init-model's checkpoint, without
// a trainer state, logs nothing.
func TestBoardCheckpoint(t *testing.T) {
	dir := t.TempDir()
	tb := filepath.Join(dir, "tb")
	out := filepath.Join(dir, "policy")
	spec := Spec{Out: out, Board: Board{Dir: tb, Step: 2}, Now: fakeClock()}
	key := Key{4}
	a, hit, err := Begin(spec, key)
	if err != nil || hit != nil {
		t.Fatalf("Begin = %v, %v; want a fresh artifact", hit, err)
	}
	lines := `{"step": 11, "epoch": 0, "pg_loss": -0.5, "kl": 0.01, "note": "x"}
not json
{"seconds": 2}
{"step": 12, "pg_loss": 0.25, "stats": {"nested": 1}}
`
	if err := os.WriteFile(filepath.Join(a.Tmp, MetricsName), []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	st := format.TrainerState{Stage: "update", Step: 12, Iteration: 2, Metrics: map[string]float64{"kl": 0.02, "pg_clipfrac": 0.125}}
	if err := WriteJSON(filepath.Join(a.Tmp, format.TrainerStateFile), st); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Publish(format.Commit{Stage: "update", Seed: 1}); err != nil {
		t.Fatal(err)
	}
	a.Release()
	want := map[string]map[int64]float32{
		"update/kl":           {2: 0.02},
		"update/pg_clipfrac":  {2: 0.125},
		"update/step/pg_loss": {11: -0.5, 12: 0.25},
		"update/step/kl":      {11: 0.01},
		"update/step/epoch":   {11: 0},
	}
	got, names := boardScalars(t, tb)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("log of a published checkpoint (-want +got):\n%s", diff)
	}
	if _, c, err := Begin(spec, key); err != nil || c == nil {
		t.Fatalf("Begin after publish = %v, %v; want a hit", c, err)
	}
	if _, again := boardScalars(t, tb); !cmp.Equal(again, names) {
		t.Errorf("log files after a hit = %v, want %v unchanged", again, names)
	}
	if err := os.RemoveAll(tb); err != nil {
		t.Fatal(err)
	}
	if _, c, err := Begin(spec, key); err != nil || c == nil {
		t.Fatalf("Begin after publish = %v, %v; want a hit", c, err)
	}
	if got, _ := boardScalars(t, tb); !cmp.Equal(got, want) {
		t.Errorf("log of a hit into an empty log dir = %v, want %v", got, want)
	}

	initTB := filepath.Join(dir, "init-tb")
	initSpec := Spec{Out: filepath.Join(dir, "init"), Board: Board{Dir: initTB}}
	b, _, err := Begin(initSpec, Key{5})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Publish(format.Commit{Stage: "init-model"}); err != nil {
		t.Fatal(err)
	}
	b.Release()
	if _, err := os.Stat(initTB); !os.IsNotExist(err) {
		t.Errorf("Stat(%s) = %v; want no log for a checkpoint without a trainer state", initTB, err)
	}
}

// TestBoardFailureIsLogged: a log dir that cannot be written costs the metrics there,
// not the run: the output is published, and the failure is a warning.
func TestBoardFailureIsLogged(t *testing.T) {
	dir := t.TempDir()
	blocker := filepath.Join(dir, "file")
	if err := os.WriteFile(blocker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	spec := testSpec(filepath.Join(dir, "out"))
	spec.Board = Board{Dir: filepath.Join(blocker, "tb")}
	spec.Log = slog.New(slog.NewTextHandler(&log, nil))
	res := mustRun(t, spec, testWork(7, counter{}))
	if res.Manifest == nil || !strings.Contains(log.String(), "metrics not written to the TensorBoard log") {
		t.Errorf("Run into an unwritable log dir: manifest %v, log %q; want the output and a warning", res.Manifest != nil, log.String())
	}
}
