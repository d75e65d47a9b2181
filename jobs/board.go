package jobs

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/mempo/mempo/format"
	"github.com/mempo/mempo/internal/tensorboard"
)

// Board is where a stage's metrics go besides its manifest or trainer state: a
// TensorBoard log directory (--tb-dir), which `tensorboard --logdir` reads and W&B
// ingests (`wandb sync --sync-tensorboard`). It changes where metrics are logged, not
// what is computed, so it is not keyed.
type Board struct {
	Dir  string // log directory; "" logs nothing
	Step int64  // the step the metrics are logged at: the RL iteration (--tb-step)
}

// StepTag is the tag infix of a checkpoint's per-optimizer-step figures:
// "<stage>/step/<field>", as "update/step/pg_loss".
const StepTag = "step"

// logBoard writes the metrics of a published output to spec.Board as one event file of
// its own: a dataset's manifest metrics, or a checkpoint's trainer_state.json metrics,
// tagged "<stage>/<metric>" at Board.Step, with a checkpoint's per-optimizer-step
// figures from _metrics.jsonl tagged "<stage>/step/<field>" at their own optimizer
// step. The file's name ends in <stage>.<step>.<short key> (boardSuffix).
//
// Every computed output is logged. A cache hit is logged only when the directory holds
// no event file of the same stage, step and key, so a pipeline rerun whose stages are
// all cached adds nothing, while a new log directory still gets the metrics of outputs
// computed before it. A --force recomputation logs again: TensorBoard then shows both
// points at that step. The output is published by then, so a failure is logged, not
// returned.
func (s Spec) logBoard(log *slog.Logger, stage string, key Key, hit bool, metrics map[string]float64, steps []tensorboard.Scalar) {
	if s.Board.Dir == "" || len(metrics) == 0 && len(steps) == 0 {
		return
	}
	suffix := boardSuffix(stage, s.Board.Step, key)
	if hit && boardHas(s.Board.Dir, suffix) {
		log.Debug("metrics already in the TensorBoard log", "dir", s.Board.Dir, "step", s.Board.Step)
		return
	}
	scalars := make([]tensorboard.Scalar, 0, len(metrics)+len(steps))
	for k, v := range metrics {
		scalars = append(scalars, tensorboard.Scalar{Tag: stage + "/" + k, Step: s.Board.Step, Value: v})
	}
	scalars = append(scalars, steps...)
	now := s.Now()
	path := filepath.Join(s.Board.Dir, tensorboard.FileName(now, s.Host, os.Getpid(), suffix))
	err := os.MkdirAll(s.Board.Dir, 0o755)
	if err == nil {
		err = tensorboard.WriteFile(path, tensorboard.Events(float64(now.UnixNano())/1e9, scalars))
	}
	if err != nil {
		log.Warn("metrics not written to the TensorBoard log", "dir", s.Board.Dir, "err", err)
		return
	}
	log.Debug("metrics written to the TensorBoard log", "file", path, "scalars", len(scalars), "cache_hit", hit)
}

// boardSuffix ends the name of the event file of one output at one step.
func boardSuffix(stage string, step int64, key Key) string {
	return fmt.Sprintf("%s.%d.%s", stage, step, key.Short())
}

// boardHas reports whether dir holds an event file whose name ends in suffix.
func boardHas(dir, suffix string) bool {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), tensorboard.FilePrefix) && strings.HasSuffix(e.Name(), "."+suffix) {
			return true
		}
	}
	return false
}

// logBoard logs the metrics of the dataset this run published or found (a hit). A part
// of a sharded run logs nothing: its merge logs the whole output.
func (r *runner) logBoard(res *Result) {
	if r.spec.Part.Whole() && res.Manifest != nil {
		r.spec.logBoard(r.log, r.spec.Stage, res.Key, res.Hit, res.Manifest.Metrics, nil)
	}
}

// logCheckpointBoard logs the metrics of the checkpoint dir, published or found: its
// trainer_state.json metrics and the per-step lines of its MetricsName. A checkpoint
// without a trainer state (init-model's) has none to log.
func (s Spec) logCheckpointBoard(log *slog.Logger, stage string, key Key, hit bool, dir string) {
	if s.Board.Dir == "" {
		return
	}
	st, err := format.ReadTrainerState(dir)
	if errors.Is(err, os.ErrNotExist) {
		return
	}
	if err != nil {
		log.Warn("metrics not written to the TensorBoard log", "dir", s.Board.Dir, "err", err)
		return
	}
	s.logBoard(log, stage, key, hit, st.Metrics, stepScalars(stage, filepath.Join(dir, MetricsName)))
}

// stepScalars reads the per-optimizer-step lines of a checkpoint's metrics file: each
// numeric field of a line with a numeric "step" becomes a scalar at that step. The
// file is a record of the run, not content, so what does not parse is skipped.
func stepScalars(stage, path string) []tensorboard.Scalar {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var out []tensorboard.Scalar
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, len(b)+1)
	for sc.Scan() {
		var line map[string]any
		if json.Unmarshal(sc.Bytes(), &line) != nil {
			continue
		}
		step, ok := line["step"].(float64)
		if !ok {
			continue
		}
		for k, v := range line {
			if v, num := v.(float64); num && k != "step" {
				out = append(out, tensorboard.Scalar{Tag: stage + "/" + StepTag + "/" + k, Step: int64(step), Value: v})
			}
		}
	}
	return out
}
