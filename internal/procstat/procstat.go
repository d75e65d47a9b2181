// Package procstat reads the process's memory figures from /proc/self/status and the
// machine's from /proc/meminfo.
package procstat

import (
	"os"
	"strconv"
	"strings"
)

// KB returns a kB field of /proc/self/status (VmRSS: resident now, VmHWM: the peak),
// and false where the file or the field is missing.
func KB(field string) (int64, bool) { return kbField("/proc/self/status", field) }

// MemKB returns a kB field of /proc/meminfo (MemAvailable: what new allocations can
// get without swapping, MemTotal), and false where the file or the field is missing.
func MemKB(field string) (int64, bool) { return kbField("/proc/meminfo", field) }

func kbField(path, field string) (int64, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 1 && f[0] == field+":" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			return kb, err == nil
		}
	}
	return 0, false
}

// MB is KB in MiB, 0 where the field is missing.
func MB(field string) float64 {
	kb, _ := KB(field)
	return float64(kb) / 1024
}
