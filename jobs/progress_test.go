package jobs

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// stepClock returns a clock the test moves by hand.
func stepClock() (now func() time.Time, advance func(time.Duration)) {
	t := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	return func() time.Time { return t }, func(d time.Duration) { t = t.Add(d) }
}

func TestReporterPlainLines(t *testing.T) {
	var out bytes.Buffer
	now, advance := stepClock()
	r := NewReporter(&out, ProgressPlain, "rollout", 10, now, 10*time.Second)
	r.Skip(2, 40) // done by an earlier run: counts toward done, not toward the rate
	advance(4 * time.Second)
	r.Add(1, 20, 400)
	if out.Len() != 0 {
		t.Fatalf("printed before the interval: %q", out.String())
	}
	advance(6 * time.Second)
	r.Add(1, 20, 600)
	got := strings.TrimSpace(out.String())
	want := "rollout: 4/10 shards (40%), 80 rows, 0.2 shards/s, 100 tok/s, eta 30s"
	if got != want {
		t.Errorf("line = %q, want %q", got, want)
	}
	advance(time.Second)
	r.Add(1, 0, 0)
	if strings.Count(out.String(), "\n") != 1 {
		t.Errorf("printed again within the interval: %q", out.String())
	}
	r.Finish()
	r.Finish()
	if n := strings.Count(out.String(), "\n"); n != 2 {
		t.Errorf("Finish printed %d lines in total, want 2 (once)", n)
	}
}

func TestReporterDoneLine(t *testing.T) {
	now, advance := stepClock()
	r := NewReporter(nil, ProgressPlain, "score", 2, now, 0)
	advance(2 * time.Second)
	r.Add(2, 10, 0)
	if got, want := r.Line(), "score: 2/2 shards (100%), 10 rows, 1 shards/s, done in 2s"; got != want {
		t.Errorf("Line() = %q, want %q", got, want)
	}
	r.Units("steps", "sequences")
	if got, want := r.Line(), "score: 2/2 steps (100%), 10 sequences, 1 steps/s, done in 2s"; got != want {
		t.Errorf("Line() after Units = %q, want %q", got, want)
	}
}

func TestReporterBar(t *testing.T) {
	var out bytes.Buffer
	now, _ := stepClock()
	r := NewReporter(&out, ProgressBar, "logprob", 3, now, 0)
	r.Add(3, 0, 0)
	r.Finish()
	if !strings.Contains(out.String(), "logprob") || !strings.Contains(out.String(), "3/3") {
		t.Errorf("bar output = %q, want the stage name and 3/3", out.String())
	}
}

func TestReporterNone(t *testing.T) {
	var out bytes.Buffer
	r := NewReporter(&out, ProgressNone, "x", 1, nil, 0)
	r.Add(1, 1, 1)
	r.Finish()
	var nilR *Reporter
	nilR.Add(1, 1, 1)
	nilR.Finish()
	if out.Len() != 0 {
		t.Errorf("ProgressNone wrote %q", out.String())
	}
}

func TestPeakRSS(t *testing.T) {
	if got := peakRSSMB(); got <= 0 {
		t.Errorf("peakRSSMB() = %v, want > 0", got)
	}
}
