package train

import (
	"bytes"
	"cmp"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/mempo/mempo/format"
	"github.com/mempo/mempo/internal/procstat"
	"github.com/mempo/mempo/internal/renameio"
	"github.com/mempo/mempo/jobs"
	"github.com/mempo/mempo/model/qwen2"
	"github.com/mempo/mempo/model/torch"
)

// maxShardBytes shards a checkpoint's weights as HF does by default (5 GB).
const maxShardBytes = 5 << 30

// Metric is one line of _metrics.jsonl: the figures of one optimizer step. Size gives
// the step's sequences and response tokens for the progress display.
type Metric interface {
	Size() (seqs, tokens int)
}

// Plan is the optimizer steps of a training run, laid out before any work so that a
// resumed run takes the same steps in the same order.
type Plan struct {
	Epochs int    // passes over the data, as configured
	Epoch  []int  // the epoch of each step, in order: one optimizer step each
	RNG    []byte // MarshalBinary of the PCG that laid the plan out, after it did
}

// Loop is one run of a training stage that turns a checkpoint into the next one — the
// skeleton update and SFT share: key the output, return a cache hit or take the lock,
// resume from the newest snapshot or start from From, train every step of the plan
// with a snapshot at a fixed cadence, then write trainer_state.json and commit the
// checkpoint. A stage supplies only its data (Prepare), its step and its summary.
type Loop[M Metric] struct {
	Stage string // "update", "sft": cache key, records, messages
	// Unit and Units name one step and several in messages and the progress display
	// ("mini-batch", "mini-batches").
	Unit, Units string
	Config      any            // the stage's resolved config: keyed, stored in trainer_state.json
	Inputs      []format.Input // everything the run reads, by digest; From among them
	From        string         // the checkpoint whose weights (and tokenizer) the run starts from
	Model       qwen2.Options  // device and dtype to train in
	AdamW       AdamWConfig
	// Continue says the run continues From's lineage: From's optimizer state carries
	// over when From was written by this same stage, and the iteration count goes on
	// (update). Otherwise the run starts a fresh optimizer at iteration 0 (SFT, the first
	// training of a lineage, on an objective of its own).
	Continue bool
	// Spec carries the runtime: Out, Seed, Force, the log, stdout, progress, KeyDebug and
	// Trace, which sees jobs.StepRecorded with the count of finished steps after each
	// snapshot and jobs.StepPublished after the commit.
	Spec jobs.Spec

	// Prepare reads the stage's data and lays out its plan. It runs only on a cache
	// miss, before the model loads.
	Prepare func(ctx context.Context) (Plan, error)
	// Memory, when set, estimates the peak memory of the plan Prepare laid out (see
	// EstimateMemory). The run prints it before the model loads and refuses a plan that
	// does not fit the device (Memory.Fit); BatchFlag names the flag that sets the
	// tokens of one pass, for the error's advice.
	Memory    func() (Memory, error)
	BatchFlag string
	// Start, when set, measures the model before the first step of a run that is not
	// resumed (SFT's held-out loss). Its figures are kept in every snapshot, so a
	// resumed run hands Finish the same ones.
	Start func(m *qwen2.Model) (map[string]float64, error)
	// Step runs step k of the plan: forward, backward, one AdamW step.
	Step func(k int, m *qwen2.Model, adam *AdamW) (M, error)
	// Finish computes trainer_state.json's metrics after the last step, from Start's
	// figures and every step's metric.
	Finish func(m *qwen2.Model, start map[string]float64, mets []M) (map[string]float64, error)
	// Write, when set, writes the stage's own files into the checkpoint directory
	// (SFT's oracle.jsonl).
	Write func(dir string) error
	// Group, when set, is the process group of a run trained by several ranks (see
	// Collective): every rank runs the loop with the same settings, rank 0 alone takes
	// the lock, snapshots and commits, the others follow its cache check, resume point
	// and weights, and every rank's Step sums gradients across the group.
	Group Collective
}

// Result says what a training run did.
type Result struct {
	Dir     string
	Key     jobs.Key
	Hit     bool // Dir already was this exact checkpoint
	Resumed int  // steps taken from an interrupted run's snapshot
	// State is the checkpoint's trainer state; nil on a rank other than 0, which
	// wrote nothing.
	State *format.TrainerState
}

// Option sets a runtime knob of a training run that does not change its output.
type Option func(*options)

type options struct {
	snapshotEvery int
	deviceMemory  int64
}

// WithDeviceMemory sets the bytes the training device offers, which the memory
// estimate must fit in (Loop.Memory). 0, the default, reads MemAvailable from
// /proc/meminfo on the CPU and checks nothing on a GPU, whose memory libtorch's C API
// does not report.
func WithDeviceMemory(n int64) Option {
	return func(o *options) { o.deviceMemory = n }
}

// WithSnapshotEvery saves a resumable snapshot after every n-th optimizer step, as
// well as after the last step of each epoch, which always gets one; n <= 0 saves at
// epoch ends only. A snapshot is a full write of the weights and the optimizer state,
// so large models want a large n. Each stage passes its default first (update: every
// step; SFT: epoch ends only), so a caller's option overrides it.
func WithSnapshotEvery(n int) Option {
	return func(o *options) { o.snapshotEvery = n }
}

// snapshotDue says whether a snapshot follows step k (0-based) of a plan whose steps
// belong to epoch[k], for WithSnapshotEvery(every).
func snapshotDue(epoch []int, k, every int) bool {
	done := k + 1
	if done == len(epoch) || epoch[done] != epoch[k] {
		return true
	}
	return every > 0 && done%every == 0
}

// cursor is the resume state saved with every snapshot: the steps done, Start's
// figures and every finished step's metric, so a resumed run reports what an
// uninterrupted one would.
type cursor[M any] struct {
	Done    int                `json:"done"`
	Start   map[string]float64 `json:"start,omitempty"`
	Metrics []M                `json:"metrics"`
}

// Run makes Spec.Out the checkpoint of l. Work happens in a temp dir beside Spec.Out;
// a failed or killed run publishes nothing and leaves an earlier checkpoint at
// Spec.Out in place, and a rerun of the same key resumes from the newest snapshot and
// ends with the same weights.
func (l Loop[M]) Run(ctx context.Context, opt ...Option) (*Result, error) {
	var o options
	for _, f := range opt {
		f(&o)
	}
	spec := l.Spec.WithDefaults()
	conf, err := jobs.CanonicalJSON(l.Config)
	if err != nil {
		return nil, fmt.Errorf("%s: encode config: %w", l.Stage, err)
	}
	key := jobs.KeySpec{Stage: l.Stage, Schema: jobs.CheckpointSchema, Config: conf, Inputs: l.Inputs, Seed: spec.Seed}.Key(spec.KeyDebug)
	art, hit, err := l.begin(spec, key)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", l.Stage, err)
	}
	if hit && !l.lead() {
		return &Result{Dir: spec.Out, Key: key, Hit: true}, nil
	}
	if hit {
		return l.hit(spec, key)
	}
	if art != nil {
		defer art.Release()
	}
	plan, err := l.Prepare(ctx)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", l.Stage, err)
	}
	if err := l.checkMemory(spec, o.deviceMemory); err != nil {
		return nil, fmt.Errorf("%s: %w", l.Stage, err)
	}
	r := &run[M]{Loop: l, spec: spec, art: art, plan: plan, every: o.snapshotEvery}
	defer r.drop()
	if err := r.load(); err != nil {
		return nil, fmt.Errorf("%s: %w", l.Stage, err)
	}
	if err := r.train(ctx); err != nil {
		return nil, r.diskFull(err)
	}
	if !l.lead() {
		// Rank 0 commits alone; waiting for it here would put its held-out scoring and
		// checkpoint write under the ranks' timeout. A launcher waits for every rank and
		// reports rank 0's failure.
		return &Result{Dir: spec.Out, Key: key}, nil
	}
	st, err := r.commit(conf)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", l.Stage, r.diskFull(err))
	}
	return &Result{Dir: spec.Out, Key: key, Resumed: r.snap.Step, State: st}, nil
}

// lead reports whether this process writes the output: the only one, or rank 0.
func (l Loop[M]) lead() bool { return l.Group == nil || l.Group.Rank() == 0 }

// Rank 0's word to the other ranks at the start of a run.
const (
	rankOK = iota
	rankHit
	rankFailed
)

func status(ok, hit bool) int64 {
	switch {
	case !ok:
		return rankFailed
	case hit:
		return rankHit
	}
	return rankOK
}

// begin keys the output and takes its lock (jobs.Begin) on the lead; in a group, rank 0
// then tells the others whether it hit the cache or failed, and only rank 0 holds an
// artifact.
func (l Loop[M]) begin(spec jobs.Spec, key jobs.Key) (art *jobs.Artifact, hit bool, err error) {
	if l.lead() {
		var h *format.Commit
		art, h, err = jobs.Begin(spec, key)
		hit = h != nil
	}
	if l.Group == nil {
		return art, hit, err
	}
	word, serr := ShareInts(l.Group, []int64{status(err == nil, hit)})
	switch {
	case err != nil:
		return nil, false, err
	case serr != nil:
		if art != nil {
			art.Release()
		}
		return nil, false, serr
	case word[0] == rankFailed:
		return nil, false, fmt.Errorf("rank 0 could not begin %s; its log says why", spec.Out)
	}
	return art, word[0] == rankHit, nil
}

// checkMemory prints the memory estimate of the plan and checks it against avail bytes,
// or, when avail is 0, against the CPU's available memory.
func (l Loop[M]) checkMemory(spec jobs.Spec, avail int64) error {
	if l.Memory == nil {
		return nil
	}
	est, err := l.Memory()
	if err != nil {
		return err
	}
	dev := cmp.Or(l.Model.Device, "cpu")
	if avail == 0 && dev == "cpu" {
		if kb, ok := procstat.MemKB("MemAvailable"); ok {
			avail = kb << 10
		}
	}
	have := "not checked: pass --device-memory"
	if avail > 0 {
		have = ByteSize(avail) + " available"
	}
	fmt.Fprintf(spec.Stdout, "%s: memory estimate on %s (%s): %s\n", l.Stage, dev, have, est)
	spec.Log.Info("memory estimate", "device", dev, "available", avail, "total", est.Total(),
		"weights", est.Weights, "gradients", est.Grads, "optimizer", est.Optimizer,
		"activations", est.Activations, "logits", est.Logits, "transient", est.Transient, "replicas", est.Replicas)
	return est.Fit(avail, dev, l.BatchFlag)
}

// hit reports a cache hit on stdout and returns the checkpoint's trainer state.
func (l Loop[M]) hit(spec jobs.Spec, key jobs.Key) (*Result, error) {
	st, err := format.ReadTrainerState(spec.Out)
	if err != nil {
		return nil, fmt.Errorf("%s: cache hit %s: %w", l.Stage, spec.Out, err)
	}
	fmt.Fprintf(spec.Stdout, "%s: cache hit: %s (key %s, step %d)\n", l.Stage, spec.Out, key.Short(), st.Step)
	return &Result{Dir: spec.Out, Key: key, Hit: true, State: st}, nil
}

// run is one Loop.Run past its cache check: the artifact, the plan and, once loaded,
// the model, its optimizer and where training stands.
type run[M Metric] struct {
	Loop[M]
	spec    jobs.Spec
	art     *jobs.Artifact
	plan    Plan
	every   int
	m       *qwen2.Model
	adam    *AdamW
	cur     cursor[M]
	snap    jobs.Snapshot
	resumed bool
	prev    *format.TrainerState // From's, when the run continues its lineage
}

// diskFull adds jobs.DiskFull's hint to an error of the process that writes the
// checkpoint: its snapshots stay in the temp dir for the rerun.
func (r *run[M]) diskFull(err error) error {
	if r.art == nil {
		return err
	}
	return jobs.DiskFull(err, r.art.Tmp)
}

func (r *run[M]) drop() {
	if r.adam != nil {
		r.adam.Drop()
	}
	if r.m != nil {
		r.m.Drop()
	}
}

// load takes the newest consistent snapshot, loads the model from it or from From,
// runs Start on a fresh run, and builds the optimizer with its state.
func (r *run[M]) load() (err error) {
	n := len(r.plan.Epoch)
	if r.art != nil {
		r.snap, r.resumed = r.art.LoadSnapshot(&r.cur)
	}
	if r.resumed && (r.cur.Done != r.snap.Step || r.cur.Done > n || len(r.cur.Metrics) != r.cur.Done) {
		r.spec.Log.Warn("ignoring inconsistent snapshot; starting over", "dir", r.snap.Dir, "done", r.cur.Done, "plan", n)
		r.resumed, r.cur, r.snap = false, cursor[M]{}, jobs.Snapshot{}
	}
	src := r.From
	if r.resumed {
		src = r.snap.Dir
	}
	if r.m, err = qwen2.Load(src, r.Model); err != nil {
		return fmt.Errorf("policy: %w", err)
	}
	// The checkpoint names From's pad token (Save); one From's tokenizer lacks fails
	// here rather than at the commit after training.
	if r.m.Config.PadTokenID == nil {
		if r.m.Config.PadTokenID, err = qwen2.TokenizerPad(r.From, r.m.Config.VocabSize); err != nil {
			return fmt.Errorf("policy: %w", err)
		}
	}
	if !r.resumed && r.Start != nil && r.lead() {
		if r.cur.Start, err = r.Start(r.m); err != nil {
			return err
		}
	}
	if r.Continue {
		if r.prev, err = format.ReadTrainerState(r.From); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("policy: %w", err)
		}
	}
	params, err := Trainable(r.m)
	if err != nil {
		return err
	}
	if r.adam, err = NewAdamW(params, r.AdamW); err != nil {
		return err
	}
	if err := r.loadOptimizer(); err != nil {
		return err
	}
	if err := r.adam.LendGrads(); err != nil {
		return err
	}
	if r.Group != nil {
		if err := r.follow0(); err != nil {
			return err
		}
	}
	if r.resumed {
		r.spec.Log.Info("resuming", "dir", r.art.Tmp, "done", r.cur.Done, "of", n, "unit", r.Units)
	}
	return nil
}

// follow0 makes every rank start where rank 0 does: its resume point, weights and
// optimizer state.
func (r *run[M]) follow0() error {
	done, err := ShareInts(r.Group, []int64{int64(r.cur.Done)})
	if err != nil {
		return err
	}
	if !r.lead() {
		r.cur.Done = int(done[0])
		r.cur.Metrics = make([]M, r.cur.Done) // rank 0 keeps the real ones
	}
	return r.adam.BroadcastState(r.Group)
}

// Trainable marks every weight of m as a leaf that accumulates gradients and returns
// them as the optimizer's parameters, named by their safetensors keys.
func Trainable(m *qwen2.Model) (ps []Param, err error) {
	defer torch.Catch("mark weights trainable", &err)
	for _, w := range m.Weights() {
		torch.InPlace(w.Tensor, func() error { return w.Tensor.RequiresGrad_(true) })
		ps = append(ps, Param{Name: w.Key, T: w.Tensor})
	}
	return ps, nil
}

// loadOptimizer restores the optimizer state: the snapshot's when resuming, else From's
// (OptimizerIn: TrainerDir, or the top level of an older checkpoint) when the run
// continues a lineage of this stage (the state of step k is an input of step k+1).
// Another stage's optimizer state is not carried over: its moments and step count
// belong to another objective and LR schedule, and verl likewise starts RL from SFT
// with a fresh optimizer.
func (r *run[M]) loadOptimizer() error {
	if r.resumed {
		name, err := OptimizerIn(r.snap.Dir)
		if err == nil && name == "" {
			err = fmt.Errorf("snapshot %s has no %s", r.snap.Dir, OptimizerFile)
		}
		if err == nil {
			err = LoadOptimizer(filepath.Join(r.snap.Dir, name), r.adam)
		}
		if err != nil {
			return fmt.Errorf("resume: %w", err)
		}
		return nil
	}
	if !r.Continue {
		return nil
	}
	name, err := OptimizerIn(r.From)
	if err != nil || name == "" {
		return err
	}
	if r.prev != nil && r.prev.Stage != r.Stage {
		r.spec.Log.Info("fresh optimizer: the policy's optimizer state is from another stage", "stage", r.prev.Stage)
		return nil
	}
	// The state is an input like the weights, which qwen2.Load verified.
	if err := format.VerifyCheckpoint(r.From, name); err != nil {
		return err
	}
	return LoadOptimizer(filepath.Join(r.From, name), r.adam)
}

// train runs the steps the plan has left, with snapshots at the cadence.
func (r *run[M]) train(ctx context.Context) error {
	n := len(r.plan.Epoch)
	progress := jobs.NewReporter(r.spec.ProgressOut, r.spec.Progress, r.Stage, int64(n), r.spec.Now, r.spec.ProgressEvery).Units(r.Units, "sequences")
	defer progress.Finish()
	progress.Skip(int64(r.cur.Done), 0)
	for k := r.cur.Done; k < n; k++ {
		if err := ctx.Err(); err != nil {
			if r.art == nil {
				return fmt.Errorf("%s: %s %d: %w", r.Stage, r.Unit, k+1, err)
			}
			return fmt.Errorf("%s: %s %d: %w (finished %s are kept in %s)", r.Stage, r.Unit, k+1, err, r.Units, r.art.Tmp)
		}
		met, err := r.Step(k, r.m, r.adam)
		if err != nil {
			return fmt.Errorf("%s: %s %d of %d (epoch %d): %w; nothing published, %s left as it was",
				r.Stage, r.Unit, k+1, n, r.plan.Epoch[k], err, r.spec.Out)
		}
		r.cur.Done, r.cur.Metrics = k+1, append(r.cur.Metrics, met)
		seqs, tokens := met.Size()
		progress.Add(1, int64(seqs), int64(tokens))
		if r.art == nil || !snapshotDue(r.plan.Epoch, k, r.every) {
			continue
		}
		if err := r.art.SaveSnapshot(r.cur.Done, r.saveState, r.cur); err != nil {
			return fmt.Errorf("%s: %w", r.Stage, err)
		}
		r.trace(jobs.StepRecorded, r.cur.Done)
	}
	return nil
}

// saveState writes what a snapshot resumes from: the weights, unsharded, so a reload
// continues bit for bit, and the optimizer state.
func (r *run[M]) saveState(dir string) error {
	if err := r.m.Save(dir, 0); err != nil {
		return err
	}
	return SaveOptimizer(filepath.Join(dir, OptimizerFile), r.adam)
}

func (r *run[M]) trace(step jobs.Step, n int) {
	if r.spec.Trace != nil {
		r.spec.Trace(step, n)
	}
}

// commit writes the checkpoint's files into the artifact and publishes it.
func (r *run[M]) commit(conf []byte) (*format.TrainerState, error) {
	metrics, err := r.Finish(r.m, r.cur.Start, r.cur.Metrics)
	if err != nil {
		return nil, err
	}
	n := len(r.plan.Epoch)
	st := &format.TrainerState{
		Stage: r.Stage, Step: r.adam.Steps(), Seed: r.spec.Seed, RNG: hex.EncodeToString(r.plan.RNG),
		Cursor: format.Cursor{Epoch: r.plan.Epochs, Done: n, Total: n}, Config: conf, Metrics: metrics,
	}
	if r.Continue {
		st.Iteration = 1
		if r.prev != nil {
			st.Iteration += r.prev.Iteration
		}
	}
	if err := r.write(r.art.Tmp, st); err != nil {
		return nil, err
	}
	if _, err := r.art.Publish(format.Commit{Stage: r.Stage, Seed: r.spec.Seed, Inputs: r.Inputs}); err != nil {
		return nil, err
	}
	r.trace(jobs.StepPublished, -1)
	r.spec.Log.Info("committed", "dir", r.spec.Out, "key", r.art.Key.Short(), "step", st.Step, "resumed", r.snap.Step)
	return st, nil
}

// write writes the checkpoint's files into dir: From's tokenizer set, the weights, the
// optimizer state (in TrainerDir), _metrics.jsonl, the stage's own files and
// trainer_state.json; the commit record follows in Publish. The tokenizer goes first:
// Save takes config.json's pad_token_id from it when From's config.json names none.
func (r *run[M]) write(dir string, st *format.TrainerState) error {
	if err := copyTokenizer(dir, r.From, r.m.Config); err != nil {
		return err
	}
	if err := r.m.Save(dir, maxShardBytes); err != nil {
		return err
	}
	if err := SaveOptimizer(filepath.Join(dir, OptimizerFile), r.adam); err != nil {
		return err
	}
	var lines bytes.Buffer
	enc := json.NewEncoder(&lines)
	for _, met := range r.cur.Metrics {
		if err := enc.Encode(met); err != nil {
			return fmt.Errorf("write %s: %w", jobs.MetricsName, err)
		}
	}
	if err := renameio.WriteFile(filepath.Join(dir, jobs.MetricsName), lines.Bytes()); err != nil {
		return err
	}
	if r.Write != nil {
		if err := r.Write(dir); err != nil {
			return err
		}
	}
	return jobs.WriteJSON(filepath.Join(dir, format.TrainerStateFile), st)
}
