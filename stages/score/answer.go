package score

import "strings"

// Tags are the answer delimiters of the agent protocol (DESIGN.md §6); a protocol file may
// rename them.
type Tags struct {
	Open  string `json:"open"`
	Close string `json:"close"`
}

// DefaultTags are the built-in protocol's answer tags.
var DefaultTags = Tags{Open: "<answer>", Close: "</answer>"}

// Extract returns the content of the last Open…Close pair in text, stripped of Python
// whitespace, and whether there was one. Pairs are found left to right, each Close being the
// first after its Open, which is what Search-R1's re.finditer(r"<answer>(.*?)</answer>",
// re.DOTALL) matches; "<answer>x <answer>y</answer>" therefore yields "x <answer>y".
func (tg Tags) Extract(text string) (string, bool) {
	var last string
	found := false
	for rest := text; ; {
		i := strings.Index(rest, tg.Open)
		if i < 0 {
			break
		}
		rest = rest[i+len(tg.Open):]
		j := strings.Index(rest, tg.Close)
		if j < 0 {
			break
		}
		last, found = rest[:j], true
		rest = rest[j+len(tg.Close):]
	}
	if !found {
		return "", false
	}
	return pyStrip(last), true
}

// Split cuts an extracted answer into its objectives' answers: on ';', each part stripped
// of Python whitespace. An empty answer is one empty part.
func Split(answer string) []string {
	parts := strings.Split(answer, ";")
	for i, p := range parts {
		parts[i] = pyStrip(p)
	}
	return parts
}

// FormatOK reports whether the final turn's text is a well-formed answer to k objectives:
//
//   - Open and Close each occur exactly once, Open first (so the answer is unambiguous and
//     nothing else looks like a second answer);
//   - the content splits on ';' into exactly k parts;
//   - every part is non-empty after stripping whitespace (an objective left blank was not
//     answered, even if some gold alias normalises to the empty string).
//
// The <mem>/<think> structure is not checked here: it shapes the memory reward, not the
// outcome, and a turn that misses it is already marked invalid by the rollout stage.
func (tg Tags) FormatOK(text string, k int) bool {
	if strings.Count(text, tg.Open) != 1 || strings.Count(text, tg.Close) != 1 {
		return false
	}
	if strings.Index(text, tg.Open) > strings.Index(text, tg.Close) {
		return false
	}
	ans, ok := tg.Extract(text)
	if !ok {
		return false
	}
	parts := Split(ans)
	if len(parts) != k {
		return false
	}
	for _, p := range parts {
		if p == "" {
			return false
		}
	}
	return true
}
