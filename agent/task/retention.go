package task

import (
	"strings"
)

// Retention measures forgetting on any trajectory, the oracle's or a policy's, from text
// alone (DESIGN.md §8: "fraction of found facts still in the final <mem>"). A fact counts
// as found when some observation shows its subject and its value; it counts as kept when
// its value is in the final memory too. Matching is case-insensitive substring matching,
// so a value that also appears by coincidence can over-count; the ratio kept/found over
// many trajectories is the metric.
func Retention(facts []Hop, observations []string, finalMemory string) (found, kept int) {
	mem := strings.ToLower(finalMemory)
	for _, f := range facts {
		subject, value := strings.ToLower(f.Subject), strings.ToLower(f.Value)
		for _, obs := range observations {
			o := strings.ToLower(obs)
			if strings.Contains(o, subject) && strings.Contains(o, value) {
				found++
				if strings.Contains(mem, value) {
					kept++
				}
				break
			}
		}
	}
	return found, kept
}
