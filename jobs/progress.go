package jobs

import (
	"fmt"
	"io"
	"time"

	"github.com/schollz/progressbar/v3"
)

// Progress is how a run shows progress.
type Progress int

const (
	ProgressNone  Progress = iota // nothing
	ProgressPlain                 // a plain line every ProgressEvery, for logs and batch schedulers
	ProgressBar                   // a redrawn bar with rate and ETA, for terminals
)

// ParseProgress parses --progress values other than "auto", which needs to know whether
// stderr is a terminal and so is resolved by the command layer.
func ParseProgress(s string) (Progress, error) {
	switch s {
	case "none":
		return ProgressNone, nil
	case "plain":
		return ProgressPlain, nil
	case "bar":
		return ProgressBar, nil
	}
	return 0, fmt.Errorf("progress %q: want auto, bar, plain or none: %w", s, ErrSpec)
}

// defaultEvery is the plain-line interval: often enough to see a stage is alive in a
// scheduler's log, rarely enough not to flood it.
const defaultEvery = 10 * time.Second

// Reporter shows progress over a known number of units (shards) with rows and tokens
// alongside. Rates and ETAs come from the injected clock and count only units done in
// this process, so a resumed run does not report the skipped shards as instant work.
// A nil *Reporter, or one without a writer, reports nothing.
type Reporter struct {
	w     io.Writer
	mode  Progress
	name  string
	total int64
	now   func() time.Time
	every time.Duration
	bar   *progressbar.ProgressBar

	start, last   time.Time
	done, skipped int64
	rows, tokens  int64
	finished      bool
	// unit and rowUnit name the work and the rows in Line: shards and rows unless Units.
	unit, rowUnit string
}

// NewReporter starts reporting total units of work called name to w.
func NewReporter(w io.Writer, mode Progress, name string, total int64, now func() time.Time, every time.Duration) *Reporter {
	if now == nil {
		now = time.Now
	}
	if every <= 0 {
		every = defaultEvery
	}
	r := &Reporter{w: w, mode: mode, name: name, total: total, now: now, every: every, unit: "shards", rowUnit: "rows"}
	if w == nil {
		r.mode = ProgressNone
	}
	r.start = now()
	r.last = r.start
	r.newBar()
	return r
}

// newBar (re)creates the terminal bar in bar mode, counting in r.unit.
func (r *Reporter) newBar() {
	if r.mode != ProgressBar {
		return
	}
	w := r.w
	r.bar = progressbar.NewOptions64(r.total,
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription(r.name),
		progressbar.OptionShowCount(),
		progressbar.OptionShowIts(),
		progressbar.OptionSetItsString(r.unit),
		progressbar.OptionSetPredictTime(true),
		progressbar.OptionThrottle(200*time.Millisecond),
		progressbar.OptionOnCompletion(func() { fmt.Fprintln(w) }),
	)
}

// Skip counts units an earlier run finished.
func (r *Reporter) Skip(units, rows int64) {
	if r == nil {
		return
	}
	r.done += units
	r.skipped += units
	r.rows += rows
	if r.bar != nil {
		r.bar.Add64(units)
	}
}

// Add counts units finished and rows and tokens produced in this process.
func (r *Reporter) Add(units, rows, tokens int64) {
	if r == nil {
		return
	}
	r.done += units
	r.rows += rows
	r.tokens += tokens
	switch r.mode {
	case ProgressBar:
		if s := r.tokensPerSecond(); s > 0 {
			r.bar.Describe(fmt.Sprintf("%s %.0f tok/s", r.name, s))
		}
		r.bar.Add64(units)
	case ProgressPlain:
		if now := r.now(); now.Sub(r.last) >= r.every {
			r.last = now
			fmt.Fprintln(r.w, r.Line())
		}
	}
}

// Finish prints the final state once.
func (r *Reporter) Finish() {
	if r == nil || r.finished {
		return
	}
	r.finished = true
	switch r.mode {
	case ProgressBar:
		r.bar.Finish()
	case ProgressPlain:
		fmt.Fprintln(r.w, r.Line())
	}
}

// Units renames the work and the rows in the progress display (a trainer reports steps
// and sequences, not shards and rows) and returns r; call it before any progress.
func (r *Reporter) Units(work, rows string) *Reporter {
	if r != nil {
		r.unit, r.rowUnit = work, rows
		r.newBar()
	}
	return r
}

// Line is the plain progress line, e.g.
// "rollout: 3/8 shards (38%), 1200 rows, 0.5 shards/s, 940 tok/s, eta 10s".
func (r *Reporter) Line() string {
	elapsed := r.now().Sub(r.start)
	s := fmt.Sprintf("%s: %d/%d %s", r.name, r.done, r.total, r.unit)
	if r.total > 0 {
		s += fmt.Sprintf(" (%.0f%%)", 100*float64(r.done)/float64(r.total))
	}
	s += fmt.Sprintf(", %d %s", r.rows, r.rowUnit)
	fresh := r.done - r.skipped
	if elapsed > 0 && fresh > 0 {
		rate := float64(fresh) / elapsed.Seconds()
		s += fmt.Sprintf(", %.3g %s/s", rate, r.unit)
		if tps := r.tokensPerSecond(); tps > 0 {
			s += fmt.Sprintf(", %.0f tok/s", tps)
		}
		if left := r.total - r.done; left > 0 {
			eta := time.Duration(float64(left) / rate * float64(time.Second))
			s += ", eta " + eta.Round(time.Second).String()
		}
	}
	if r.done >= r.total {
		s += ", done in " + elapsed.Round(time.Millisecond).String()
	}
	return s
}

func (r *Reporter) tokensPerSecond() float64 {
	elapsed := r.now().Sub(r.start).Seconds()
	if elapsed <= 0 {
		return 0
	}
	return float64(r.tokens) / elapsed
}
