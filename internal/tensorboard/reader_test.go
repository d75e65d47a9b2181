package tensorboard

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// tensorboardPython is a Python that imports tensorboard: MEMPO_TEST_PYTHON, else the
// project's cached bench environment (build/bench_compare/venv.sh); "" when there is
// none.
func tensorboardPython() string {
	cache := os.Getenv("MEMPO_CACHE")
	if cache == "" {
		home, _ := os.UserHomeDir()
		cache = filepath.Join(home, ".cache", "mempo")
	}
	for _, p := range []string{os.Getenv("MEMPO_TEST_PYTHON"), filepath.Join(cache, "bench-venv", "bin", "python")} {
		if p != "" && exec.Command(p, "-c", "import tensorboard").Run() == nil {
			return p
		}
	}
	return ""
}

const noPython = "no Python with tensorboard (set MEMPO_TEST_PYTHON to one, e.g. a venv with `pip install tensorboard`)"

// TestTensorBoardReads: TensorBoard's own reader (EventAccumulator over a directory of
// two files, as a stage run and a later one leave it) sees every tag, step and value.
func TestTensorBoardReads(t *testing.T) {
	py := tensorboardPython()
	if py == "" {
		t.Skip(noPython)
	}
	dir := t.TempDir()
	files := [][]Scalar{
		{{"advantage/reward_mean", 1, 0.25}, {"advantage/adv_std", 1, 1.5}, {"update/kl", 1, 0.001}},
		{{"advantage/reward_mean", 2, 0.5}, {"update/kl", 2, 0}, {"update/step/pg_loss", 17, -0.125}},
	}
	for i, sc := range files {
		name := FileName(time.Unix(1700000000+int64(i), 0), "host", 7, "test")
		if err := WriteFile(filepath.Join(dir, name), Events(1700000000+float64(i), sc)); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(py, filepath.Join("testdata", "read.py"), dir)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("read.py: %v\n%s", err, stderr.Bytes())
	}
	var got struct {
		Scalars      map[string][][2]float64 `json:"scalars"`
		FileVersions []string                `json:"file_versions"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("read.py printed %q: %v", out, err)
	}
	want := map[string][][2]float64{
		"advantage/reward_mean": {{1, 0.25}, {2, 0.5}},
		"advantage/adv_std":     {{1, 1.5}},
		"update/kl":             {{1, float64(float32(0.001))}, {2, 0}},
		"update/step/pg_loss":   {{17, -0.125}},
	}
	if diff := cmp.Diff(want, got.Scalars); diff != "" {
		t.Errorf("TensorBoard's scalars (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{FileVersion, FileVersion}, got.FileVersions); diff != "" {
		t.Errorf("file versions (-want +got):\n%s", diff)
	}
	t.Logf("TensorBoard's EventAccumulator read: %s", out)
}

// TestGoldenIsTensorBoard reruns testdata/golden.py where a Python has tensorboard and
// requires the committed golden: it is TensorBoard's record writer's output, not a copy
// of this package's.
func TestGoldenIsTensorBoard(t *testing.T) {
	py := tensorboardPython()
	if py == "" {
		t.Skip(noPython)
	}
	dir := t.TempDir()
	script, err := filepath.Abs(filepath.Join("testdata", "golden.py"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(py, script)
	cmd.Dir = dir
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("golden.py: %v\n%s", err, msg)
	}
	got, err := os.ReadFile(filepath.Join(dir, "golden.tfevents"))
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(filepath.Join("testdata", "golden.tfevents"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("golden.py wrote %x, testdata/golden.tfevents holds %x: regenerate it with golden.py", got, want)
	}
}
