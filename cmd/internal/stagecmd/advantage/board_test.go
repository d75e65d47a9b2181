package advantage

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/mempo/mempo/cmd/internal/app"
	"github.com/mempo/mempo/format"
	"github.com/mempo/mempo/format/formattest"
	"github.com/mempo/mempo/internal/tensorboard"
)

func f32(v float32) *float32 { return &v }
func i32(v int32) *int32     { return &v }

// writeInputs writes one question with two samples, one with a memory, as the rollouts,
// scores and logprobs datasets mempo-advantage reads; it returns their flags.
func writeInputs(t *testing.T, dir string) []string {
	t.Helper()
	rolls := []format.Rollout{
		{UID: "q", Sample: 0, Turn: 0, ResponseIDs: make([]int32, 4), MemStart: 0, MemEnd: 2},
		{UID: "q", Sample: 1, Turn: 0, ResponseIDs: make([]int32, 3)},
	}
	scores := []format.Score{{UID: "q", Sample: 0, Reward: 1}, {UID: "q", Sample: 1, Reward: 0}}
	lps := []format.Logprob{
		{UID: "q", Sample: 0, Turn: 0, PMem: f32(0.75), PFull: f32(0.25), MemGolds: i32(1), Objectives: 1},
		{UID: "q", Sample: 1, Turn: 0, Objectives: 1},
	}
	r, s, l := filepath.Join(dir, "rollouts"), filepath.Join(dir, "scores"), filepath.Join(dir, "logprobs")
	if _, err := formattest.WriteDataset(r, "test", [][]format.Rollout{rolls}); err != nil {
		t.Fatal(err)
	}
	if _, err := formattest.WriteDataset(s, "test", [][]format.Score{scores}); err != nil {
		t.Fatal(err)
	}
	if _, err := formattest.WriteDataset(l, "test", [][]format.Logprob{lps}); err != nil {
		t.Fatal(err)
	}
	return []string{"--rollouts", r, "--scores", s, "--logprobs", l, "--progress", "none"}
}

// runStage runs mempo-advantage with args and returns its stdout.
func runStage(t *testing.T, args ...string) string {
	t.Helper()
	a := App()
	var stdout, stderr bytes.Buffer
	a.Writer, a.ErrWriter = &stdout, &stderr
	if code := app.Main(a, append([]string{"mempo-advantage"}, args...)); code != app.ExitOK {
		t.Fatalf("mempo-advantage %q: exit %d: %s", args, code, stderr.String())
	}
	return stdout.String()
}

// readBoard reads every event file of dir: tag → step → value, and how many files.
func readBoard(t *testing.T, dir string) (map[string]map[int64]float32, int) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]map[int64]float32{}
	for _, e := range ents {
		evs, err := tensorboard.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
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
	return got, len(ents)
}

// TestTensorBoardLog runs mempo-advantage with --tb-dir: the manifest's metrics, the
// advantage summary included, are in the log as advantage/<metric> at --tb-step; the
// flags are not keyed (a run without them is a cache hit); a cached rerun adds no file
// to a log that has the stage's metrics at that step and writes them into one that
// does not.
func TestTensorBoardLog(t *testing.T) {
	dir := t.TempDir()
	in := writeInputs(t, dir)
	out, tb := filepath.Join(dir, "advantages"), filepath.Join(dir, "tb")
	runStage(t, append(in, "--out", out, "--tb-dir", tb, "--tb-step", "3")...)

	m, err := format.ReadManifest(out)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]map[int64]float32{}
	for k, v := range m.Metrics {
		want["advantage/"+k] = map[int64]float32{3: float32(v)}
	}
	for _, tag := range []string{"advantage/groups", "advantage/adv_outcome_mean", "advantage/tokens_per_s"} {
		if _, ok := want[tag]; !ok {
			t.Fatalf("manifest metrics %v lack %s", m.Metrics, tag)
		}
	}
	got, files := readBoard(t, tb)
	if diff := cmp.Diff(want, got); diff != "" || files != 1 {
		t.Errorf("TensorBoard log of the run: %d files (want 1), scalars (-want +got):\n%s", files, diff)
	}

	if stdout := runStage(t, append(in, "--out", out)...); !strings.Contains(stdout, "cache hit") {
		t.Errorf("rerun without --tb-dir printed %q, want a cache hit: the log flags are not keyed", stdout)
	}
	runStage(t, append(in, "--out", out, "--tb-dir", tb, "--tb-step", "3")...)
	if _, files := readBoard(t, tb); files != 1 {
		t.Errorf("log after a cached rerun at the same step holds %d files, want 1", files)
	}
	fresh := filepath.Join(dir, "tb-fresh")
	t.Setenv("MEMPO_TB_DIR", fresh)
	t.Setenv("MEMPO_TB_STEP", "3")
	runStage(t, append(in, "--out", out)...)
	if got, _ := readBoard(t, fresh); !cmp.Equal(got, want) {
		t.Errorf("log of a cached run into a new log dir (MEMPO_TB_DIR) = %v, want the manifest's metrics %v", got, want)
	}
}
