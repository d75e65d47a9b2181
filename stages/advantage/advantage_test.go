package advantage

import (
	"encoding/json"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// handCase is one question with two trajectories:
//
//	sample 0, reward 1: turn 0 (5 tokens, mem [0,3), P_mem .75, P_full .25)
//	                    turn 1 (6 tokens, mem [1,4), P_mem .5,  P_full .5)
//	sample 1, reward 0: turn 0 (4 tokens, mem [0,2), P_mem .25, P_full .75)
//	                    turn 1 (3 tokens, no mem)
//
// Outcome: mean 1/2, std √(1/2), A^T = ±0.5/(√0.5 + 1e-6).
// Memory rewards with b = P_full: .5, 0, −.5 (mean 0, unbiased std .5); with b = none:
// .75, .5, .25 (mean .5, std .25); with const:0.25: .5, .25, 0 (mean .25, std .25).
func handCase() ([]Score, []Turn) {
	scores := []Score{{UID: "q", Sample: 1, Reward: 0}, {UID: "q", Sample: 0, Reward: 1}}
	turns := []Turn{
		{UID: "q", Sample: 1, Turn: 1, ResponseLen: 3},
		{UID: "q", Sample: 0, Turn: 0, ResponseLen: 5, Mem: &Span{0, 3}, PMem: 0.75, PFull: 0.25},
		{UID: "q", Sample: 1, Turn: 0, ResponseLen: 4, Mem: &Span{0, 2}, PMem: 0.25, PFull: 0.75},
		{UID: "q", Sample: 0, Turn: 1, ResponseLen: 6, Mem: &Span{1, 4}, PMem: 0.5, PFull: 0.5},
	}
	return scores, turns
}

func TestComputeHand(t *testing.T) {
	at := 0.5 / (math.Sqrt(0.5) + 1e-6)
	tests := []struct {
		name       string
		cfg        Config
		memReward  [4]float64 // in turns order
		memAdv     [4]float64
		pools      int
		degenerate int
	}{
		{
			name:      "full baseline question pool",
			cfg:       DefaultConfig(),
			memReward: [4]float64{0, 0.5, -0.5, 0},
			memAdv:    [4]float64{0, 0.5 / 0.500001, -0.5 / 0.500001, 0},
			pools:     1,
		},
		{
			name:      "no baseline",
			cfg:       Config{MemBaseline: Baseline{Kind: BaselineNone}, MemPool: PoolQuestion, MemCoef: 1},
			memReward: [4]float64{0, 0.75, 0.25, 0.5},
			memAdv:    [4]float64{0, 0.25 / 0.250001, -0.25 / 0.250001, 0},
			pools:     1,
		},
		{
			name:      "const baseline",
			cfg:       Config{MemBaseline: Baseline{Kind: BaselineConst, Value: 0.25}, MemPool: PoolQuestion, MemCoef: 1},
			memReward: [4]float64{0, 0.5, 0, 0.25},
			memAdv:    [4]float64{0, 0.25 / 0.250001, -0.25 / 0.250001, 0},
			pools:     1,
		},
		{
			// Turn 0 pools .5 and −.5 (std √.5); turn 1 holds one memory, so it gets 0.
			name:       "turn pool",
			cfg:        Config{MemBaseline: Baseline{Kind: BaselineFull}, MemPool: PoolTurn, MemCoef: 1},
			memReward:  [4]float64{0, 0.5, -0.5, 0},
			memAdv:     [4]float64{0, 0.5 / (math.Sqrt(0.5) + 1e-6), -0.5 / (math.Sqrt(0.5) + 1e-6), 0},
			pools:      2,
			degenerate: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			scores, turns := handCase()
			rows, sum, err := Compute(tt.cfg, scores, turns)
			if err != nil {
				t.Fatalf("Compute: %v", err)
			}
			wantOutcome := [4]float64{-at, at, -at, at}
			for i, r := range rows {
				if r.UID != turns[i].UID || r.Sample != turns[i].Sample || r.Turn != turns[i].Turn {
					t.Errorf("row %d is %s/%d/%d, want the order of turns", i, r.UID, r.Sample, r.Turn)
				}
				if r.AdvOutcome != wantOutcome[i] {
					t.Errorf("row %d AdvOutcome = %v, want %v", i, r.AdvOutcome, wantOutcome[i])
				}
				if r.HasMem != (turns[i].Mem != nil) {
					t.Errorf("row %d HasMem = %v, want %v", i, r.HasMem, turns[i].Mem != nil)
				}
				if math.Abs(r.MemReward-tt.memReward[i]) > 1e-15 || math.Abs(r.AdvMemory-tt.memAdv[i]) > 1e-12 {
					t.Errorf("row %d memory = %v, %v, want %v, %v", i, r.MemReward, r.AdvMemory, tt.memReward[i], tt.memAdv[i])
				}
			}
			if sum.Pools != tt.pools || sum.ZeroSpreadPools != tt.degenerate || sum.Memories != 3 ||
				sum.Groups != 1 || sum.ZeroSpreadGroups != 0 {
				t.Errorf("summary pools %d/%d memories %d groups %d/%d, want %d/%d 3 1/0",
					sum.ZeroSpreadPools, sum.Pools, sum.Memories, sum.ZeroSpreadGroups, sum.Groups, tt.degenerate, tt.pools)
			}
			if sum.Token.Count != 18 || sum.Outcome.Count != 2 || sum.MemAdvantage.Count != 3 {
				t.Errorf("summary counts %d tokens %d outcomes %d memories, want 18 2 3",
					sum.Token.Count, sum.Outcome.Count, sum.MemAdvantage.Count)
			}
		})
	}
}

func TestComputeMemCoef(t *testing.T) {
	scores, turns := handCase()
	cfg := DefaultConfig()
	cfg.MemCoef = 0
	plain, _, err := Compute(cfg, scores, turns)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MemCoef = 1
	mem, _, err := Compute(cfg, scores, turns)
	if err != nil {
		t.Fatal(err)
	}
	for i, tn := range turns {
		// λ = 0 is plain GRPO: every token carries the outcome advantage.
		for j, a := range plain[i].Advantages {
			if a != float32(plain[i].AdvOutcome) {
				t.Errorf("λ=0 row %d token %d = %v, want %v", i, j, a, float32(plain[i].AdvOutcome))
			}
		}
		// λ = 1: inside the span exactly A^T + A^M (rounded once), outside A^T.
		for j, a := range mem[i].Advantages {
			want := float32(mem[i].AdvOutcome)
			if tn.Mem != nil && j >= tn.Mem.Start && j < tn.Mem.End {
				want = float32(mem[i].AdvOutcome + mem[i].AdvMemory)
				if d := float64(a) - float64(plain[i].Advantages[j]); math.Abs(d-mem[i].AdvMemory) > 1e-6 {
					t.Errorf("row %d token %d: λ=1 − λ=0 = %v, want A^M = %v", i, j, d, mem[i].AdvMemory)
				}
			}
			if a != want {
				t.Errorf("λ=1 row %d token %d = %v, want %v", i, j, a, want)
			}
		}
	}
	// Row 1 is sample 0 turn 0, span [0,3) of 5: check the layout literally.
	hi, lo := float32(mem[1].AdvOutcome+mem[1].AdvMemory), float32(mem[1].AdvOutcome)
	if diff := cmp.Diff([]float32{hi, hi, hi, lo, lo}, mem[1].Advantages); diff != "" {
		t.Errorf("row 1 advantages (-want +got):\n%s", diff)
	}
}

func TestComputeOrderIndependent(t *testing.T) {
	scores, turns := handCase()
	a, sa, err := Compute(DefaultConfig(), scores, turns)
	if err != nil {
		t.Fatal(err)
	}
	rev := make([]Turn, len(turns))
	for i, tn := range turns {
		rev[len(turns)-1-i] = tn
	}
	b, sb, err := Compute(DefaultConfig(), []Score{scores[1], scores[0]}, rev)
	if err != nil {
		t.Fatal(err)
	}
	for i := range a {
		if diff := cmp.Diff(a[i], b[len(b)-1-i]); diff != "" {
			t.Errorf("row %d after reversing the input (-want +got):\n%s", i, diff)
		}
	}
	if diff := cmp.Diff(sa, sb); diff != "" {
		t.Errorf("summary after reversing the input (-want +got):\n%s", diff)
	}
}

func TestComputeZeroSpreadGroup(t *testing.T) {
	scores := []Score{{"a", 0, 1}, {"a", 1, 1}, {"b", 0, 0}, {"b", 1, 1}}
	turns := []Turn{{UID: "a", Sample: 0, ResponseLen: 2}, {UID: "a", Sample: 1, ResponseLen: 2},
		{UID: "b", Sample: 0, ResponseLen: 1}, {UID: "b", Sample: 1, ResponseLen: 1}}
	rows, sum, err := Compute(DefaultConfig(), scores, turns)
	if err != nil {
		t.Fatal(err)
	}
	if rows[0].AdvOutcome != 0 || rows[1].AdvOutcome != 0 {
		t.Errorf("all-equal group advantages = %v, %v, want 0, 0", rows[0].AdvOutcome, rows[1].AdvOutcome)
	}
	if sum.ZeroSpreadGroupFrac != 0.5 || sum.Memories != 0 || sum.Pools != 0 || sum.ZeroSpreadPoolFrac != 0 {
		t.Errorf("summary = %+v, want zero-spread fraction 0.5 and no memories", sum)
	}
	for _, st := range []Stats{sum.MemReward, sum.MemAdvantage} {
		if st != (Stats{}) {
			t.Errorf("stats of no memories = %+v, want zero", st)
		}
	}
}

func TestComputeErrors(t *testing.T) {
	span := func(s, e int) *Span { return &Span{s, e} }
	ok := func() ([]Score, []Turn) {
		return []Score{{"q", 0, 1}, {"q", 1, 0}},
			[]Turn{{UID: "q", Sample: 0, Turn: 0, ResponseLen: 4, Mem: span(0, 2), PMem: 0.5, PFull: 0.5},
				{UID: "q", Sample: 1, Turn: 0, ResponseLen: 4}}
	}
	tests := []struct {
		name   string
		edit   func(*Config, *[]Score, *[]Turn)
		class  error
		naming []string
	}{
		{"nan reward", func(_ *Config, s *[]Score, _ *[]Turn) { (*s)[1].Reward = math.NaN() }, ErrInput, []string{"uid q", "sample 1", "reward NaN"}},
		{"inf reward", func(_ *Config, s *[]Score, _ *[]Turn) { (*s)[0].Reward = math.Inf(1) }, ErrInput, []string{"uid q", "sample 0"}},
		{"duplicate score", func(_ *Config, s *[]Score, _ *[]Turn) { (*s)[1].Sample = 0 }, ErrInput, []string{"uid q", "sample 0", "duplicate"}},
		{"missing sample", func(_ *Config, s *[]Score, _ *[]Turn) { (*s)[1].Sample = 2 }, ErrInput, []string{"uid q", "sample 2", "missing"}},
		{"turn without score", func(_ *Config, _ *[]Score, tr *[]Turn) { (*tr)[1].UID = "r" }, ErrInput, []string{"uid r", "sample 1", "turn 0", "no score"}},
		{"duplicate turn", func(_ *Config, _ *[]Score, tr *[]Turn) { (*tr)[1].Sample = 0 }, ErrInput, []string{"uid q", "sample 0", "turn 0", "duplicate"}},
		{"scored without turns", func(_ *Config, _ *[]Score, tr *[]Turn) { *tr = (*tr)[:1] }, ErrInput, []string{"uid q", "sample 1", "no turn"}},
		{"span past end", func(_ *Config, _ *[]Score, tr *[]Turn) { (*tr)[0].Mem = span(2, 5) }, ErrInput, []string{"uid q", "sample 0", "turn 0", "[2,5)", "4 tokens"}},
		{"span negative", func(_ *Config, _ *[]Score, tr *[]Turn) { (*tr)[0].Mem = span(-1, 2) }, ErrInput, []string{"turn 0", "mem span"}},
		{"span empty", func(_ *Config, _ *[]Score, tr *[]Turn) { (*tr)[0].Mem = span(2, 2) }, ErrInput, []string{"turn 0", "mem span"}},
		{"p_mem nan", func(_ *Config, _ *[]Score, tr *[]Turn) { (*tr)[0].PMem = math.NaN() }, ErrInput, []string{"sample 0", "turn 0", "p_mem NaN"}},
		{"p_full above one", func(_ *Config, _ *[]Score, tr *[]Turn) { (*tr)[0].PFull = 1.5 }, ErrInput, []string{"turn 0", "p_full 1.5"}},
		{"negative length", func(_ *Config, _ *[]Score, tr *[]Turn) { (*tr)[1].ResponseLen = -1 }, ErrInput, []string{"sample 1", "turn 0"}},
		{"nan coef", func(c *Config, _ *[]Score, _ *[]Turn) { c.MemCoef = math.NaN() }, ErrConfig, []string{"--mem-coef"}},
		{"overflowing coef", func(c *Config, _ *[]Score, _ *[]Turn) { c.MemCoef = 1e308 }, ErrConfig, []string{"--mem-coef 1e+308", "[-1e+06, 1e+06]"}},
		{"bad pool", func(c *Config, _ *[]Score, _ *[]Turn) { c.MemPool = "trajectory" }, ErrConfig, []string{"--mem-pool", "trajectory"}},
		{"zero baseline", func(c *Config, _ *[]Score, _ *[]Turn) { c.MemBaseline = Baseline{} }, ErrConfig, []string{"--mem-baseline"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultConfig()
			scores, turns := ok()
			tt.edit(&cfg, &scores, &turns)
			rows, _, err := Compute(cfg, scores, turns)
			if !errors.Is(err, tt.class) {
				t.Fatalf("Compute error = %v, want %v", err, tt.class)
			}
			if rows != nil {
				t.Errorf("Compute returned %d rows with an error, want none", len(rows))
			}
			for _, s := range tt.naming {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("Compute error %q does not mention %q", err, s)
				}
			}
		})
	}
	// The unmodified input is accepted, so each case above fails for its own reason.
	scores, turns := ok()
	if _, _, err := Compute(DefaultConfig(), scores, turns); err != nil {
		t.Fatalf("Compute(valid) = %v", err)
	}
}

func TestParseBaseline(t *testing.T) {
	good := map[string]Baseline{
		"full":        {Kind: BaselineFull},
		"none":        {Kind: BaselineNone},
		"const:0.5":   {Kind: BaselineConst, Value: 0.5},
		"const:-1e-3": {Kind: BaselineConst, Value: -0.001},
		"const:0":     {Kind: BaselineConst},
	}
	for s, want := range good {
		got, err := ParseBaseline(s)
		if err != nil || got != want {
			t.Errorf("ParseBaseline(%q) = %+v, %v, want %+v", s, got, err, want)
		}
		again, err := ParseBaseline(got.String())
		if err != nil || again != got {
			t.Errorf("ParseBaseline(%q.String() = %q) = %+v, %v, want %+v", s, got.String(), again, err, got)
		}
	}
	for _, s := range []string{"", "Full", "const", "const:", "const:abc", "const:NaN", "const:inf", "const:1e39", "const:-2e6", "constant:1", "full:1"} {
		if got, err := ParseBaseline(s); !errors.Is(err, ErrConfig) {
			t.Errorf("ParseBaseline(%q) = %+v, %v, want ErrConfig", s, got, err)
		}
	}
	for _, s := range []string{"question", "turn"} {
		if got, err := ParsePool(s); err != nil || string(got) != s {
			t.Errorf("ParsePool(%q) = %q, %v", s, got, err)
		}
	}
	if _, err := ParsePool("sample"); !errors.Is(err, ErrConfig) {
		t.Errorf("ParsePool(sample) error = %v, want ErrConfig", err)
	}
}

func TestConfigJSON(t *testing.T) {
	cfg := Config{NoStdNorm: true, MemBaseline: Baseline{Kind: BaselineConst, Value: 0.25}, MemPool: PoolTurn, MemCoef: 0.5}
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"no_std_norm":true,"mem_baseline":"const:0.25","mem_pool":"turn","mem_coef":0.5}`
	if string(b) != want {
		t.Errorf("json.Marshal(config) = %s, want %s", b, want)
	}
	var back Config
	if err := json.Unmarshal(b, &back); err != nil || back != cfg {
		t.Errorf("json.Unmarshal(%s) = %+v, %v, want %+v", b, back, err, cfg)
	}
	if err := json.Unmarshal([]byte(`{"mem_baseline":"const:x"}`), &back); !errors.Is(err, ErrConfig) {
		t.Errorf("json.Unmarshal(bad baseline) error = %v, want ErrConfig", err)
	}
}

// TestComputeContentOnly: handCase with the tags as one token at each end of every span.
// Default config: A^T = ±at, A^M = +m for sample 0 turn 0 and −m for sample 1 turn 0
// (m = 0.5/0.500001), 0 for sample 0 turn 1. With MemContentOnly the tag tokens keep A^T;
// sample 1 turn 0's span [0,2) is two tags around nothing, so none of its tokens carries
// its −m, though its reward still counts in the pool.
func TestComputeContentOnly(t *testing.T) {
	scores, turns := handCase()
	content := map[[2]int]Span{{0, 0}: {1, 2}, {0, 1}: {2, 3}, {1, 0}: {1, 1}}
	for i := range turns {
		if c, ok := content[[2]int{turns[i].Sample, turns[i].Turn}]; ok {
			turns[i].Content = &c
		}
	}
	at := 0.5 / (math.Sqrt(0.5) + 1e-6)
	m := 0.5 / 0.500001
	p, n, pm := float32(at), float32(-at), float32(at+m)
	want := [][]float32{
		{n, n, n},
		{p, pm, p, p, p},
		{n, n, n, n},
		{p, p, p, p, p, p},
	}
	whole := [][]float32{
		{n, n, n},
		{pm, pm, pm, p, p},
		{float32(-at - m), float32(-at - m), n, n},
		{p, p, p, p, p, p},
	}
	for _, tc := range []struct {
		only bool
		want [][]float32
	}{{true, want}, {false, whole}} {
		cfg := DefaultConfig()
		cfg.MemContentOnly = tc.only
		rows, _, err := Compute(cfg, scores, turns)
		if err != nil {
			t.Fatalf("Compute(content only %v): %v", tc.only, err)
		}
		for i, r := range rows {
			if diff := cmp.Diff(tc.want[i], r.Advantages); diff != "" {
				t.Errorf("content only %v, row %d (sample %d turn %d) advantages (-want +got):\n%s", tc.only, i, r.Sample, r.Turn, diff)
			}
		}
		if got := rows[2].AdvMemory; math.Abs(got+m) > 1e-12 {
			t.Errorf("content only %v: sample 1 turn 0 A^M = %v, want %v (the memory stays in its pool)", tc.only, got, -m)
		}
	}

	bad := slices.Clone(turns)
	bad[1].Content = &Span{2, 4} // past the mem span [0,3)
	if _, _, err := Compute(DefaultConfig(), scores, bad); !errors.Is(err, ErrInput) || !strings.Contains(err.Error(), "outside the mem span") {
		t.Errorf("content outside the mem span: err = %v, want ErrInput naming it", err)
	}
}

func TestContentSpan(t *testing.T) {
	tests := []struct {
		name   string
		pieces []string
		mem    Span
		want   Span
		ok     bool
	}{
		{"single-token tags", []string{"<mem>", "Ann", " was", "</mem>", "<think>"}, Span{0, 4}, Span{1, 3}, true},
		{"span later in the response", []string{" ", "<mem>", "x", "</mem>"}, Span{1, 4}, Span{2, 3}, true},
		// "<", "mem", ">Ann" hold tag bytes: ">Ann" is not content.
		{"split open tag", []string{"<", "mem", ">Ann", " was", "</", "mem", ">"}, Span{0, 7}, Span{3, 4}, true},
		// The close tag shares its token with the next block: that token is not content.
		{"close tag shares a token", []string{"<mem>", "Ann", "</mem><think>"}, Span{0, 3}, Span{1, 2}, true},
		{"empty memory", []string{"<mem>", "</mem>", "<think>"}, Span{0, 2}, Span{1, 1}, true},
		{"empty token inside", []string{"<mem>", "", "Ann", "</mem>"}, Span{0, 4}, Span{2, 3}, true},
		{"no close tag", []string{"<mem>", "Ann", "<think>"}, Span{0, 3}, Span{}, false},
		{"no open tag", []string{"Ann", "</mem>"}, Span{0, 2}, Span{}, false},
		{"span past the tokens", []string{"<mem>", "</mem>"}, Span{0, 3}, Span{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := ContentSpan(tt.pieces, tt.mem, "<mem>", "</mem>")
			if got != tt.want || ok != tt.ok {
				t.Errorf("ContentSpan = %v, %v; want %v, %v", got, ok, tt.want, tt.ok)
			}
		})
	}
}
