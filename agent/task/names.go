package task

import (
	"math/rand/v2"
	"strings"
)

// Fictional names are built from a small syllable set so that a ~4k byte-level BPE
// trained on the corpus covers them with few merges.
var syllables = []string{
	"bar", "ven", "tor", "lis", "mar", "kel", "dor", "ran", "sel", "vin",
	"tal", "mor", "ken", "zar", "lun", "fen", "gar", "hol", "nir", "pel",
	"rin", "sol", "tam", "vek", "wen", "yor", "zel", "bel", "cor", "dan",
	"fir", "gil", "hal", "jor", "kal", "lem", "nor", "pra", "sur", "tev",
}

var (
	citySuffixes    = []string{"ton", "mere", "ford", "holm", "dale", "port", "wick"}
	companySuffixes = []string{"Works", "Labs", "Foods", "Motors", "Press", "Mills", "Lines"}
	occupations     = []string{"painter", "baker", "teacher", "pilot", "farmer", "doctor", "writer", "singer", "sailor", "builder", "engineer", "judge"}
)

func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// parts draws the syllables and suffix of a name of the kind. The syllable that a
// near-duplicate changes is at index mutable(kind).
func parts(r *rand.Rand, kind Kind) []string {
	syl := func() string { return syllables[r.IntN(len(syllables))] }
	switch kind {
	case Person:
		return []string{syl(), syl(), syl(), syl()}
	case City:
		return []string{syl(), syl(), citySuffixes[r.IntN(len(citySuffixes))]}
	case Company:
		return []string{syl(), syl(), companySuffixes[r.IntN(len(companySuffixes))]}
	default:
		return []string{syl(), syl(), "ia"}
	}
}

func mutable(kind Kind) int {
	if kind == Person {
		return 3 // the family name's last syllable: "Barven Torlis" -> "Barven Torkel"
	}
	return 1
}

func render(kind Kind, p []string) string {
	switch kind {
	case Person:
		return capitalize(p[0]+p[1]) + " " + capitalize(p[2]+p[3])
	case Company:
		return capitalize(p[0]+p[1]) + " " + p[2]
	default:
		return capitalize(p[0] + p[1] + p[2])
	}
}

// registry keeps names unique, and no name inside another, so that a query naming one
// entity never names a second one by accident.
type registry struct{ names []string }

func (g *registry) ok(name string) bool {
	for _, n := range g.names {
		if strings.Contains(n, name) || strings.Contains(name, n) {
			return false
		}
	}
	return true
}

// fresh draws a new name; twinOf, when non-nil, is the parts of the entity to
// near-duplicate. It gives up after a bounded number of draws and returns "".
func (g *registry) fresh(r *rand.Rand, kind Kind, twinOf []string) (string, []string) {
	for range 200 {
		var p []string
		if twinOf != nil {
			p = append([]string(nil), twinOf...)
			i := mutable(kind)
			p[i] = syllables[r.IntN(len(syllables))]
		} else {
			p = parts(r, kind)
		}
		if name := render(kind, p); g.ok(name) {
			g.names = append(g.names, name)
			return name, p
		}
	}
	return "", nil
}
