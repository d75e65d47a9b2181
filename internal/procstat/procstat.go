// Package procstat reads the process's memory figures from /proc/self/status, the
// machine's from /proc/meminfo, and what tells one process from another that reused its
// pid: a process's start time (/proc/<pid>/stat) and the boot's id.
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

// StartTime is when process pid started, in clock ticks since boot (field 22 of
// /proc/<pid>/stat), as a string; "" where the process or the file does not exist. Two
// processes that share a pid in one boot never share it.
func StartTime(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	// The command name (field 2) is in parentheses and may hold spaces: count from
	// the last ')'.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return ""
	}
	f := strings.Fields(string(b[i+1:])) // fields 3, 4, …
	if len(f) < 20 {
		return ""
	}
	return f[19]
}

// BootID is this boot's random id (/proc/sys/kernel/random/boot_id); "" where the file
// does not exist.
func BootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
