package score

import (
	"strings"
	"unicode"
)

// Normalize is Search-R1's normalize_answer (verl/utils/reward_score/qa_em.py, itself the
// SQuAD v1.1 evaluation script), reproduced character for character as CPython 3 runs it:
//
//	white_space_fix(remove_articles(remove_punc(lower(s))))
//
// Each step follows CPython rather than Go's nearest equivalent, because Go differs from
// Python on exactly the inputs a model produces by accident:
//
//   - lower is str.lower(): full case mapping, so U+0130 'İ' becomes "i\u0307", and a
//     capital sigma becomes final 'ς' at the end of a word (Unicode Final_Sigma context).
//     Go's strings.ToLower gives 'i' and always 'σ'.
//   - remove_punc deletes only string.punctuation, the 32 ASCII punctuation characters;
//     "“", "—", "¿" and every other non-ASCII punctuation survive. So "1,000" becomes
//     "1000" and "3.5" becomes "35".
//   - remove_articles is re.sub(r"\b(a|an|the)\b", " ", s) with a str pattern: a word is a
//     maximal run of characters for which Python's \w holds (str.isalnum() or '_'), so
//     "theater" keeps its "the" and combining marks (category M) end a word: "the\u0301"
//     loses its "the".
//   - white_space_fix is " ".join(s.split()): Python's whitespace adds U+001C..U+001F to
//     Go's unicode.IsSpace set.
//
// Go strings may hold invalid UTF-8 (a decoded token prefix); each invalid byte reads as
// U+FFFD, which no step removes. Character tables are Go's unicode package; the golden in
// testdata/ pins the agreement with CPython's unicodedata for every code point that both
// versions assign.
func Normalize(s string) string {
	rs := pyLower([]rune(s))
	rs = removePunct(rs)
	rs = removeArticles(rs)
	return whiteSpaceFix(rs)
}

// pyLower is CPython's str.lower (Objects/unicodeobject.c do_lower): full lowercase mapping
// plus the Final_Sigma rule, judged on the original (not yet lowered) neighbours.
func pyLower(rs []rune) []rune {
	out := make([]rune, 0, len(rs))
	for i, r := range rs {
		switch r {
		case 'İ': // the only unconditional multi-rune lowercase in SpecialCasing.txt
			out = append(out, 'i', '\u0307')
		case 'Σ':
			if finalSigma(rs, i) {
				out = append(out, 'ς')
			} else {
				out = append(out, 'σ')
			}
		default:
			out = append(out, unicode.ToLower(r))
		}
	}
	return out
}

// finalSigma reports whether rs[i] stands in the Final_Sigma context
// \p{cased}\p{case-ignorable}* Σ !(\p{case-ignorable}*\p{cased}), exactly as CPython's
// handle_capital_sigma scans it.
func finalSigma(rs []rune, i int) bool {
	j := i - 1
	for j >= 0 && caseIgnorable(rs[j]) {
		j--
	}
	if j < 0 || !cased(rs[j]) {
		return false
	}
	j = i + 1
	for j < len(rs) && caseIgnorable(rs[j]) {
		j++
	}
	return j == len(rs) || !cased(rs[j])
}

// cased is the Unicode Cased property: Lowercase, Uppercase or Lt.
func cased(r rune) bool {
	return unicode.IsLower(r) || unicode.IsUpper(r) || unicode.IsTitle(r) ||
		unicode.Is(unicode.Other_Lowercase, r) || unicode.Is(unicode.Other_Uppercase, r)
}

// caseIgnorable is the Unicode Case_Ignorable property (UAX #44, DerivedCoreProperties):
// Mn, Me, Cf, Lm, Sk, or Word_Break MidLetter, MidNumLet or Single_Quote. Go has no
// Word_Break table, so those few characters are listed.
func caseIgnorable(r rune) bool {
	switch r {
	case '\'', '.', ':', '\u00B7', '\u0387', '\u055F', '\u05F4', '\u2018', '\u2019',
		'\u2024', '\u2027', '\uFE13', '\uFE52', '\uFE55', '\uFF07', '\uFF0E', '\uFF1A':
		return true
	}
	return unicode.In(r, unicode.Mn, unicode.Me, unicode.Cf, unicode.Lm, unicode.Sk)
}

// asciiPunct is Python's string.punctuation.
const asciiPunct = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"

func removePunct(rs []rune) []rune {
	out := rs[:0:0]
	for _, r := range rs {
		if r < 0x80 && strings.ContainsRune(asciiPunct, r) {
			continue
		}
		out = append(out, r)
	}
	return out
}

// pyWord is Python re's \w for str patterns (Modules/_sre/sre.c SRE_UNI_IS_WORD):
// str.isalnum() or '_'. isalnum is isalpha (L*) or isdecimal/isdigit/isnumeric (N*).
func pyWord(r rune) bool {
	return r == '_' || unicode.IsLetter(r) || unicode.IsNumber(r)
}

// removeArticles replaces every maximal \w run that is exactly "a", "an" or "the" by one
// space. That is what re.sub(r"\b(a|an|the)\b", " ", s) does: both \b sit at run edges, and
// the alternation backtracks from "a" to "an" when needed.
func removeArticles(rs []rune) []rune {
	out := make([]rune, 0, len(rs))
	for i := 0; i < len(rs); {
		if !pyWord(rs[i]) {
			out = append(out, rs[i])
			i++
			continue
		}
		j := i
		for j < len(rs) && pyWord(rs[j]) {
			j++
		}
		switch string(rs[i:j]) {
		case "a", "an", "the":
			out = append(out, ' ')
		default:
			out = append(out, rs[i:j]...)
		}
		i = j
	}
	return out
}

// pySpace is str.isspace for one character: general category Zs or bidirectional class
// WS, B or S (Objects/unicodectype.c). It differs from unicode.IsSpace by U+001C..U+001F.
func pySpace(r rune) bool {
	switch r {
	case '\t', '\n', '\v', '\f', '\r', 0x1C, 0x1D, 0x1E, 0x1F, ' ', 0x85, 0xA0:
		return true
	}
	return r > 0xFF && unicode.IsSpace(r)
}

func whiteSpaceFix(rs []rune) string {
	var b strings.Builder
	for i := 0; i < len(rs); {
		if pySpace(rs[i]) {
			i++
			continue
		}
		j := i
		for j < len(rs) && !pySpace(rs[j]) {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(string(rs[i:j]))
		i = j
	}
	return b.String()
}

// pyStrip is str.strip() with no argument: Python whitespace at both ends.
func pyStrip(s string) string {
	return strings.TrimFunc(s, pySpace)
}
