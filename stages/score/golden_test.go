package score

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"unicode/utf8"
)

// The goldens come from testdata/golden.py (CPython, Search-R1's normalize_answer verbatim);
// regenerate with `cd testdata && python3 golden.py`. Comparisons are exact.

func readGolden(t *testing.T, name string, v any) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatalf("read golden: %v (regenerate with: cd testdata && python3 golden.py)", err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("parse testdata/%s: %v", name, err)
	}
}

type normalizeGolden struct {
	Python    string `json:"python"`
	Normalize []struct {
		Name string `json:"name"`
		Text string `json:"text"`
		Want string `json:"want"`
	} `json:"normalize"`
	Metric []struct {
		Name       string   `json:"name"`
		Prediction string   `json:"prediction"`
		Golds      []string `json:"golds"`
		EM         int      `json:"em"`
		SubEM      *int     `json:"subem"`
		F1         float64  `json:"f1"`
	} `json:"metric"`
	Extract []struct {
		Name string  `json:"name"`
		Text string  `json:"text"`
		Want *string `json:"want"`
	} `json:"extract"`
}

func TestNormalizeGolden(t *testing.T) {
	var g normalizeGolden
	readGolden(t, "normalize.json", &g)
	if n := len(g.Normalize) + len(g.Metric) + len(g.Extract); n < 60 {
		t.Fatalf("golden holds %d cases, want at least 60", n)
	}
	for _, c := range g.Normalize {
		t.Run("normalize/"+c.Name, func(t *testing.T) {
			if got := Normalize(c.Text); got != c.Want {
				t.Errorf("Normalize(%+q) = %+q, want %+q (CPython %s)", c.Text, got, c.Want, g.Python)
			}
		})
	}
	for _, c := range g.Metric {
		t.Run("metric/"+c.Name, func(t *testing.T) {
			if got, want := ExactMatch(c.Prediction, c.Golds), c.EM == 1; got != want {
				t.Errorf("ExactMatch(%+q, %+q) = %v, want %v", c.Prediction, c.Golds, got, want)
			}
			if c.SubEM == nil {
				t.Fatalf("testdata/normalize.json: metric %s has no subem (regenerate with: cd testdata && python3 golden.py)", c.Name)
			}
			if got, want := SubstringMatch(c.Prediction, c.Golds), *c.SubEM == 1; got != want {
				t.Errorf("SubstringMatch(%+q, %+q) = %v, want %v", c.Prediction, c.Golds, got, want)
			}
			if got := F1(c.Prediction, c.Golds); got != c.F1 {
				t.Errorf("F1(%+q, %+q) = %v, want %v", c.Prediction, c.Golds, got, c.F1)
			}
		})
	}
	for _, c := range g.Extract {
		t.Run("extract/"+c.Name, func(t *testing.T) {
			got, ok := DefaultTags.Extract(c.Text)
			if ok != (c.Want != nil) || (ok && got != *c.Want) {
				t.Errorf("Extract(%+q) = %+q, %v, want %+v", c.Text, got, ok, c.Want)
			}
		})
	}
}

type unicodeGolden struct {
	Python            string    `json:"python"`
	Unidata           string    `json:"unidata"`
	Assigned          [][2]rune `json:"assigned"`
	Space             [][2]rune `json:"space"`
	Word              [][2]rune `json:"word"`
	CaseIgnorable     [][2]rune `json:"case_ignorable"`
	CasedNotIgnorable [][2]rune `json:"cased_not_ignorable"`
	Lower             [][2]any  `json:"lower"`
}

func inRanges(rs [][2]rune, r rune) bool {
	_, ok := slices.BinarySearchFunc(rs, r, func(x [2]rune, r rune) int {
		switch {
		case x[1] < r:
			return -1
		case x[0] > r:
			return 1
		}
		return 0
	})
	return ok
}

// TestUnicodeClassesMatchCPython checks every code point CPython's unicodedata assigns (Go's
// tables may be a newer Unicode version; code points new there are not in the golden).
func TestUnicodeClassesMatchCPython(t *testing.T) {
	var g unicodeGolden
	readGolden(t, "unicode.json", &g)
	lower := make(map[rune]string, len(g.Lower))
	for _, e := range g.Lower {
		cp, _ := e[0].(float64)
		s, _ := e[1].(string)
		lower[rune(cp)] = s
	}
	checked, bad := 0, 0
	report := func(format string, args ...any) {
		bad++
		if bad <= 20 {
			t.Errorf(format, args...)
		}
	}
	for _, rg := range g.Assigned {
		for r := rg[0]; r <= rg[1]; r++ {
			if !utf8.ValidRune(r) {
				continue
			}
			checked++
			if got, want := pySpace(r), inRanges(g.Space, r); got != want {
				report("pySpace(%U) = %v, want %v", r, got, want)
			}
			if got, want := pyWord(r), inRanges(g.Word, r); got != want {
				report("pyWord(%U) = %v, want %v", r, got, want)
			}
			ign := inRanges(g.CaseIgnorable, r)
			if got := caseIgnorable(r); got != ign {
				report("caseIgnorable(%U) = %v, want %v", r, got, ign)
			}
			if !ign {
				if got, want := cased(r), inRanges(g.CasedNotIgnorable, r); got != want {
					report("cased(%U) = %v, want %v", r, got, want)
				}
			}
			want, ok := lower[r]
			if !ok {
				want = string(r)
			}
			if got := string(pyLower([]rune{r})); got != want {
				report("lower(%U) = %+q, want %+q", r, got, want)
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d code points disagree with CPython %s (unidata %s)", bad, checked, g.Python, g.Unidata)
	}
	if checked < 100000 {
		t.Errorf("checked %d code points, want the whole assigned range", checked)
	}
}
