package procstat

import (
	"os"
	"os/exec"
	"testing"
)

func TestKB(t *testing.T) {
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Skip("no /proc/self/status on this platform")
	}
	rss, ok := KB("VmRSS")
	peak, okPeak := KB("VmHWM")
	if !ok || !okPeak || rss <= 0 || peak < rss {
		t.Errorf("VmRSS %d (%v), VmHWM %d (%v): want both, the peak at least the resident size", rss, ok, peak, okPeak)
	}
	if got := MB("VmRSS"); got <= 0 {
		t.Errorf("MB(VmRSS) = %v, want > 0", got)
	}
	if _, ok := KB("NoSuchField"); ok || MB("NoSuchField") != 0 {
		t.Error("a missing field reads as present")
	}
}

func TestMemKB(t *testing.T) {
	if _, err := os.Stat("/proc/meminfo"); err != nil {
		t.Skip("no /proc/meminfo on this platform")
	}
	avail, ok := MemKB("MemAvailable")
	total, okTotal := MemKB("MemTotal")
	if !ok || !okTotal || avail <= 0 || avail > total {
		t.Errorf("MemAvailable %d (%v), MemTotal %d (%v): want both, available at most the total", avail, ok, total, okTotal)
	}
}

// TestStartTime: this process has a start time, stable across reads, which a child
// started later does not share; a pid that does not exist has none.
func TestStartTime(t *testing.T) {
	self := StartTime(os.Getpid())
	if self == "" || StartTime(os.Getpid()) != self {
		t.Fatalf("StartTime(self) = %q, want a stable value", self)
	}
	cmd := exec.Command("sleep", "1")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	if child := StartTime(cmd.Process.Pid); child == "" {
		t.Errorf("StartTime(child) empty")
	}
	if got := StartTime(1 << 30); got != "" {
		t.Errorf("StartTime of no process = %q, want empty", got)
	}
	if BootID() == "" {
		t.Errorf("BootID() empty on Linux")
	}
}
