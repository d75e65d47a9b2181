package procstat

import (
	"os"
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
