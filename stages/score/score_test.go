package score

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestFormatOK(t *testing.T) {
	tests := []struct {
		name string
		text string
		k    int
		want bool
	}{
		{"one objective", "<mem>m</mem><think>t</think><answer>Paris</answer>", 1, true},
		{"two objectives", "<answer>Paris; 1990</answer>", 2, true},
		{"spaces around parts", "<answer> Paris ;\t1990 \n</answer>", 2, true},
		{"too few parts", "<answer>Paris</answer>", 2, false},
		{"too many parts", "<answer>Paris; 1990; x</answer>", 2, false},
		{"empty part", "<answer>Paris; </answer>", 2, false},
		{"empty answer", "<answer></answer>", 1, false},
		{"whitespace answer", "<answer> \u3000 </answer>", 1, false},
		{"no answer", "<search>who</search>", 1, false},
		{"two answers", "<answer>a</answer><answer>b</answer>", 1, false},
		{"unclosed", "<answer>Paris", 1, false},
		{"close before open", "</answer>x<answer>", 1, false},
		{"stray open inside", "<answer>x <answer>y</answer>", 1, false},
		{"text after close", "<answer>Paris</answer>\n", 1, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := DefaultTags.FormatOK(tt.text, tt.k); got != tt.want {
				t.Errorf("FormatOK(%+q, %d) = %v, want %v", tt.text, tt.k, got, tt.want)
			}
		})
	}
}

func TestSplit(t *testing.T) {
	got := Split(" a ;b;; c\u00a0")
	want := []string{"a", "b", "", "c"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Split (-want +got):\n%s", diff)
	}
}

func TestScore(t *testing.T) {
	twoThirds := 2.0 / 3 // a variable, so the mean is rounded as at run time
	golds := [][]string{{"Paris", "Paris, France"}, {"1,990", "nineteen ninety"}}
	turns := func(final string) []Turn {
		return []Turn{
			{Turn: 0, PromptTokens: 100, ResponseTokens: 20, Text: "<mem>m</mem><search>q</search>"},
			{Turn: 1, PromptTokens: 130, ResponseTokens: 25, Text: "<mem>m</mem><search>q2</search>"},
			{Turn: 2, PromptTokens: 120, ResponseTokens: 15, Text: final},
		}
	}
	tests := []struct {
		name   string
		reward Reward
		final  string
		want   Result
	}{
		{
			name: "all correct em-all", reward: RewardEMAll,
			final: "<mem>m</mem><answer>the Paris; 1990</answer>",
			want: Result{Answer: "the Paris; 1990", Answers: []string{"the Paris", "1990"},
				EM: []bool{true, true}, F1: []float64{1, 1}, EMMean: 1, F1Mean: 1, FormatOK: true, Reward: 1},
		},
		{
			name: "one correct em-all", reward: RewardEMAll,
			final: "<answer>Paris; 1991</answer>",
			want: Result{Answer: "Paris; 1991", Answers: []string{"Paris", "1991"},
				EM: []bool{true, false}, F1: []float64{1, 0}, EMMean: 0.5, F1Mean: 0.5, FormatOK: true, Reward: 0},
		},
		{
			name: "one correct em-mean", reward: RewardEMMean,
			final: "<answer>Paris; 1991</answer>",
			want: Result{Answer: "Paris; 1991", Answers: []string{"Paris", "1991"},
				EM: []bool{true, false}, F1: []float64{1, 0}, EMMean: 0.5, F1Mean: 0.5, FormatOK: true, Reward: 0.5},
		},
		{
			// F1 of "ninety" against "nineteen ninety": p = 1, r = 1/2, f1 = 2/3.
			name: "partial f1", reward: RewardEMMean,
			final: "<answer>Paris France; ninety</answer>",
			want: Result{Answer: "Paris France; ninety", Answers: []string{"Paris France", "ninety"},
				EM: []bool{true, false}, F1: []float64{1, 2.0 / 3}, EMMean: 0.5, F1Mean: (1 + twoThirds) / 2,
				FormatOK: true, Reward: 0.5},
		},
		{
			name: "missing part em-mean is zero", reward: RewardEMMean,
			final: "<answer>Paris</answer>",
			want: Result{Answer: "Paris", Answers: []string{"Paris"},
				EM: []bool{true, false}, F1: []float64{1, 0}, EMMean: 0.5, F1Mean: 0.5, FormatOK: false, Reward: 0},
		},
		{
			// Search-R1's subem_check: "paris" is in "paris texas", "1990" in "1990s"
			// (a character substring, though F1 shares no token); neither is an exact match.
			name: "every objective contained subem-all", reward: RewardSubEMAll,
			final: "<answer>Paris Texas; the 1990s</answer>",
			want: Result{Answer: "Paris Texas; the 1990s", Answers: []string{"Paris Texas", "the 1990s"},
				EM: []bool{false, false}, F1: []float64{2.0 / 3, 0}, EMMean: 0, F1Mean: twoThirds / 2,
				FormatOK: true, Reward: 1},
		},
		{
			name: "every objective contained em-all", reward: RewardEMAll,
			final: "<answer>Paris Texas; the 1990s</answer>",
			want: Result{Answer: "Paris Texas; the 1990s", Answers: []string{"Paris Texas", "the 1990s"},
				EM: []bool{false, false}, F1: []float64{2.0 / 3, 0}, EMMean: 0, F1Mean: twoThirds / 2,
				FormatOK: true, Reward: 0},
		},
		{
			name: "one contained subem-all", reward: RewardSubEMAll,
			final: "<answer>Paris Texas; 1989</answer>",
			want: Result{Answer: "Paris Texas; 1989", Answers: []string{"Paris Texas", "1989"},
				EM: []bool{false, false}, F1: []float64{2.0 / 3, 0}, EMMean: 0, F1Mean: twoThirds / 2,
				FormatOK: true, Reward: 0},
		},
		{
			name: "one contained subem-mean", reward: RewardSubEMMean,
			final: "<answer>Paris Texas; 1989</answer>",
			want: Result{Answer: "Paris Texas; 1989", Answers: []string{"Paris Texas", "1989"},
				EM: []bool{false, false}, F1: []float64{2.0 / 3, 0}, EMMean: 0, F1Mean: twoThirds / 2,
				FormatOK: true, Reward: 0.5},
		},
		{
			// The gold must lie inside the answer, not the reverse: "france" is in
			// "paris france" and "ninety" in "nineteen ninety", which does not count.
			name: "answer inside gold subem-mean", reward: RewardSubEMMean,
			final: "<answer>France; ninety</answer>",
			want: Result{Answer: "France; ninety", Answers: []string{"France", "ninety"},
				EM: []bool{false, false}, F1: []float64{2.0 / 3, 2.0 / 3}, EMMean: 0, F1Mean: twoThirds,
				FormatOK: true, Reward: 0},
		},
		{
			name: "exact answers subem-all", reward: RewardSubEMAll,
			final: "<answer>the Paris; 1990</answer>",
			want: Result{Answer: "the Paris; 1990", Answers: []string{"the Paris", "1990"},
				EM: []bool{true, true}, F1: []float64{1, 1}, EMMean: 1, F1Mean: 1, FormatOK: true, Reward: 1},
		},
		{
			name: "missing part subem-mean is zero", reward: RewardSubEMMean,
			final: "<answer>Paris Texas</answer>",
			want: Result{Answer: "Paris Texas", Answers: []string{"Paris Texas"},
				EM: []bool{false, false}, F1: []float64{2.0 / 3, 0}, EMMean: 0, F1Mean: twoThirds / 2,
				FormatOK: false, Reward: 0},
		},
		{
			name: "extra part subem-all is zero", reward: RewardSubEMAll,
			final: "<answer>Paris; 1990; x</answer>",
			want: Result{Answer: "Paris; 1990; x", Answers: []string{"Paris", "1990", "x"},
				EM: []bool{true, true}, F1: []float64{1, 1}, EMMean: 1, F1Mean: 1, FormatOK: false, Reward: 0},
		},
		{
			name: "final turn searched", reward: RewardEMAll,
			final: "<search>Paris</search>",
			want:  Result{EM: []bool{false, false}, F1: []float64{0, 0}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := Config{Reward: tt.reward, Tags: DefaultTags}
			got, err := Score(cfg, Trajectory{UID: "q1", Sample: 3, Turns: turns(tt.final)}, golds)
			if err != nil {
				t.Fatalf("Score: %v", err)
			}
			want := tt.want
			want.UID, want.Sample = "q1", 3
			want.TT, want.PT, want.Turns = 410, 155, 3
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("Score (-want +got):\n%s", diff)
			}
			for _, v := range append([]float64{got.Reward, got.EMMean, got.F1Mean}, got.F1...) {
				if math.IsNaN(v) || math.IsInf(v, 0) {
					t.Errorf("Score produced %v", v)
				}
			}
		})
	}
}

func TestScoreEarlierAnswerIgnored(t *testing.T) {
	// Only the final turn is read: an answer in an earlier turn does not count.
	tr := Trajectory{UID: "q", Turns: []Turn{
		{Turn: 0, Text: "<answer>Paris</answer>"},
		{Turn: 1, Text: "<search>x</search>"},
	}}
	got, err := Score(DefaultConfig(), tr, [][]string{{"Paris"}})
	if err != nil {
		t.Fatal(err)
	}
	if got.Reward != 0 || got.FormatOK || got.EM[0] {
		t.Errorf("Score = reward %v format %v em %v, want 0 false false", got.Reward, got.FormatOK, got.EM[0])
	}
}

func TestScoreErrors(t *testing.T) {
	ok := Trajectory{UID: "q7", Sample: 2, Turns: []Turn{{Turn: 0, Text: "<answer>x</answer>"}}}
	tests := []struct {
		name  string
		cfg   Config
		tr    Trajectory
		golds [][]string
		class error
	}{
		{"bad reward", Config{Reward: "em", Tags: DefaultTags}, ok, [][]string{{"x"}}, ErrConfig},
		{"empty tag", Config{Reward: RewardEMAll}, ok, [][]string{{"x"}}, ErrConfig},
		{"no golds", DefaultConfig(), ok, nil, ErrInput},
		{"objective without alias", DefaultConfig(), ok, [][]string{{"x"}, {}}, ErrInput},
		{"no turns", DefaultConfig(), Trajectory{UID: "q7", Sample: 2}, [][]string{{"x"}}, ErrInput},
		{"turns out of order", DefaultConfig(), Trajectory{UID: "q7", Sample: 2,
			Turns: []Turn{{Turn: 1}, {Turn: 1}}}, [][]string{{"x"}}, ErrInput},
		{"negative tokens", DefaultConfig(), Trajectory{UID: "q7", Sample: 2,
			Turns: []Turn{{Turn: 0, PromptTokens: -1}}}, [][]string{{"x"}}, ErrInput},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Score(tt.cfg, tt.tr, tt.golds)
			if !errors.Is(err, tt.class) {
				t.Fatalf("Score error = %v, want %v", err, tt.class)
			}
			if tt.class == ErrInput && !containsAll(err.Error(), "uid q7", "sample 2") {
				t.Errorf("Score error %q does not name uid q7 sample 2", err)
			}
		})
	}
}

func TestParseReward(t *testing.T) {
	for _, s := range []string{"em-all", "em-mean", "subem-all", "subem-mean"} {
		if got, err := ParseReward(s); err != nil || string(got) != s {
			t.Errorf("ParseReward(%q) = %q, %v, want %q, nil", s, got, err, s)
		}
	}
	for _, s := range []string{"f1", "", "subem", "sub-em-all", "SUBEM-ALL", "subem_mean", " subem-all"} {
		if _, err := ParseReward(s); !errors.Is(err, ErrConfig) {
			t.Errorf("ParseReward(%q) error = %v, want ErrConfig", s, err)
		}
	}
}

// TestSubstringMatch pins the cases where Search-R1's subem_check (gold in prediction,
// after normalize_answer) and em_check part ways; testdata/normalize.json checks the same
// against CPython.
func TestSubstringMatch(t *testing.T) {
	tests := []struct {
		name       string
		prediction string
		aliases    []string
		em, subem  bool
	}{
		{"prediction longer", "the city of Paris", []string{"paris"}, false, true},
		{"gold longer", "Paris", []string{"Paris, France"}, false, false},
		{"second alias", "born in NYC", []string{"New York City", "NYC"}, false, true},
		{"inside a word", "comparison", []string{"Paris"}, false, true},
		{"exact", "The Paris", []string{"paris"}, true, true},
		{"empty prediction", "", []string{"dog"}, false, false},
		// normalize_answer("The") == "" and `"" in s` is True in Python: matches anything.
		{"empty normalised alias", "London", []string{"The"}, false, true},
		{"empty both", "", []string{""}, true, true},
		{"no aliases", "Paris", nil, false, false},
		// Invalid bytes read as U+FFFD, which Normalize keeps: "\ufffdparis" holds "paris".
		{"invalid UTF-8 prefix", "\xffParis", []string{"paris"}, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := SubstringMatch(tt.prediction, tt.aliases); got != tt.subem {
				t.Errorf("SubstringMatch(%+q, %+q) = %v, want %v", tt.prediction, tt.aliases, got, tt.subem)
			}
			if got := ExactMatch(tt.prediction, tt.aliases); got != tt.em {
				t.Errorf("ExactMatch(%+q, %+q) = %v, want %v", tt.prediction, tt.aliases, got, tt.em)
			}
		})
	}
}

func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

func TestNormalizeInvalidUTF8(t *testing.T) {
	// Each invalid byte reads as U+FFFD, a symbol: not a word character, so "the" after it
	// is still an article, and not punctuation or space, so it stays.
	if got, want := Normalize("\xffThe  End\xfe"), "\ufffd end\ufffd"; got != want {
		t.Errorf("Normalize(invalid UTF-8) = %+q, want %+q", got, want)
	}
}
