package score

import "strings"

// ExactMatch is Search-R1's em_check: the normalised prediction equals the normalised form
// of at least one alias. An empty alias list never matches.
func ExactMatch(prediction string, aliases []string) bool {
	p := Normalize(prediction)
	for _, a := range aliases {
		if Normalize(a) == p {
			return true
		}
	}
	return false
}

// SubstringMatch is Search-R1's subem_check (verl/utils/reward_score/qa_em.py): the
// normalised form of at least one alias occurs in the normalised prediction. The direction
// is gold in prediction, so "the city of Paris" matches "Paris" but "Paris" does not match
// "Paris, France". It is a character substring, not a token one ("comparison" contains
// "paris"); Normalize returns valid UTF-8, on which Go's byte search finds exactly Python's
// code-point substrings. As Python's `"" in s` is True, an alias that normalises to ""
// ("The", "!") matches every prediction, the empty one included; an empty alias list never
// matches. Every exact match is a substring match.
func SubstringMatch(prediction string, aliases []string) bool {
	p := Normalize(prediction)
	for _, a := range aliases {
		if strings.Contains(p, Normalize(a)) {
			return true
		}
	}
	return false
}

// F1 is the SQuAD v1.1 token F1 (multiset overlap of normalised tokens), maximised over the
// aliases. As in SQuAD v1.1, no overlap — including two empty answers — scores 0. The
// arithmetic is the script's, in its order, so results equal CPython's bit for bit.
func F1(prediction string, aliases []string) float64 {
	pred := strings.Fields(Normalize(prediction))
	best := 0.0
	for _, a := range aliases {
		if f := tokenF1(pred, strings.Fields(Normalize(a))); f > best {
			best = f
		}
	}
	return best
}

// tokenF1 takes tokens of normalised strings, which hold single ASCII spaces only, so
// strings.Fields splits them exactly as Python's str.split does.
func tokenF1(pred, gold []string) float64 {
	counts := make(map[string]int, len(gold))
	for _, g := range gold {
		counts[g]++
	}
	same := 0
	for _, p := range pred {
		if counts[p] > 0 {
			counts[p]--
			same++
		}
	}
	if same == 0 {
		return 0
	}
	precision := 1.0 * float64(same) / float64(len(pred))
	recall := 1.0 * float64(same) / float64(len(gold))
	return (2 * precision * recall) / (precision + recall)
}
