package jobstest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/mempo/mempo/format"
	"github.com/mempo/mempo/internal/renameio"
	"github.com/mempo/mempo/jobs"
)

// CheckpointStage names the probe's checkpoint stage.
const CheckpointStage = "probe-checkpoint"

// WeightsFile is the probe checkpoint's stand-in for model.safetensors.
const WeightsFile = "weights.bin"

// ErrStep marks a training step of the probe checkpoint that failed (CheckpointConfig.FailAt).
var ErrStep = errors.New("probe step failed")

// CheckpointConfig is the probe checkpoint stage's configuration: a tensor-free
// stand-in for a trainer, whose state after each step is the sha256 of the state
// before, the step and the seed, so a resumed run ends bit for bit where an
// uninterrupted one does.
type CheckpointConfig struct {
	// Steps is the number of training steps; a snapshot follows each.
	Steps int `json:"steps"`
	// Data stands for what the run trains on: it is keyed, so two values are two
	// checkpoints, as two input datasets are.
	Data string `json:"data"`
	// FailAt, when > 0, makes step FailAt (from 1) fail, as a non-finite loss would.
	// It stays out of the key: the failure is the run's, not the checkpoint's.
	FailAt int `json:"-"`
}

// CheckpointResult says what RunCheckpoint did.
type CheckpointResult struct {
	Commit  *format.Commit
	Hit     bool
	Resumed int // steps taken from an interrupted run's snapshot
}

type checkpointCursor struct {
	Done int `json:"done"`
}

// RunCheckpoint makes spec.Out the probe checkpoint of cfg through the checkpoint
// runtime (jobs.Begin, snapshots, Artifact.Publish), as train.Loop does: spec.Trace
// sees jobs.StepRecorded with the steps done after each snapshot, the publish steps,
// and jobs.StepPublished once Publish returns. It prints one line on spec.Stdout.
func RunCheckpoint(ctx context.Context, cfg CheckpointConfig, spec jobs.Spec) (*CheckpointResult, error) {
	if cfg.Steps < 1 {
		return nil, fmt.Errorf("%s: %d steps, want >= 1: %w", CheckpointStage, cfg.Steps, ErrConfig)
	}
	spec = spec.WithDefaults()
	conf, err := jobs.CanonicalJSON(cfg)
	if err != nil {
		return nil, fmt.Errorf("%s: encode config: %w", CheckpointStage, err)
	}
	key := jobs.KeySpec{Stage: CheckpointStage, Schema: jobs.CheckpointSchema, Config: conf, Seed: spec.Seed}.Key(spec.KeyDebug)
	art, hit, err := jobs.Begin(spec, key)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", CheckpointStage, err)
	}
	if hit != nil {
		fmt.Fprintf(spec.Stdout, "%s: cache hit: %s (key %s)\n", CheckpointStage, spec.Out, key.Short())
		return &CheckpointResult{Commit: hit, Hit: true}, nil
	}
	defer art.Release()
	trace := func(step jobs.Step, n int) {
		if spec.Trace != nil {
			spec.Trace(step, n)
		}
	}
	res := &CheckpointResult{}
	state := initialState(spec.Seed)
	var cur checkpointCursor
	if snap, ok := art.LoadSnapshot(&cur); ok {
		b, err := os.ReadFile(filepath.Join(snap.Dir, WeightsFile))
		if err == nil && len(b) == sha256.Size && cur.Done == snap.Step && cur.Done <= cfg.Steps {
			state, res.Resumed = b, cur.Done
		} else {
			cur = checkpointCursor{}
		}
	}
	for k := cur.Done; k < cfg.Steps; k++ {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("%s: step %d: %w", CheckpointStage, k+1, err)
		}
		if k+1 == cfg.FailAt {
			return nil, fmt.Errorf("%s: step %d of %d: %w; nothing published", CheckpointStage, k+1, cfg.Steps, ErrStep)
		}
		state = nextState(state, k, spec.Seed)
		cur.Done = k + 1
		write := func(dir string) error { return renameio.WriteFile(filepath.Join(dir, WeightsFile), state) }
		if err := art.SaveSnapshot(cur.Done, write, cur); err != nil {
			return nil, fmt.Errorf("%s: %w", CheckpointStage, err)
		}
		trace(jobs.StepRecorded, cur.Done)
	}
	if err := renameio.WriteFile(filepath.Join(art.Tmp, WeightsFile), bytes.Repeat(state, 64)); err != nil {
		return nil, fmt.Errorf("%s: %w", CheckpointStage, err)
	}
	if err := jobs.WriteJSON(filepath.Join(art.Tmp, "config.json"), cfg); err != nil {
		return nil, fmt.Errorf("%s: %w", CheckpointStage, err)
	}
	if res.Commit, err = art.Publish(format.Commit{Stage: CheckpointStage, Seed: spec.Seed}); err != nil {
		return nil, fmt.Errorf("%s: %w", CheckpointStage, err)
	}
	trace(jobs.StepPublished, -1)
	fmt.Fprintf(spec.Stdout, "%s: wrote %s (%d steps, %d resumed)\n", CheckpointStage, spec.Out, cfg.Steps, res.Resumed)
	return res, nil
}

func initialState(seed int64) []byte {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(seed))
	sum := sha256.Sum256(b[:])
	return sum[:]
}

// nextState is the state after step k (0-based).
func nextState(state []byte, k int, seed int64) []byte {
	b := binary.LittleEndian.AppendUint64(bytes.Clone(state), uint64(k))
	b = binary.LittleEndian.AppendUint64(b, uint64(seed))
	sum := sha256.Sum256(b)
	return sum[:]
}
