package advantage

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// ErrConfig marks an invalid advantage configuration; ErrInput marks rows that cannot be
// turned into advantages (nothing is written for them).
var (
	ErrConfig = errors.New("bad advantage config")
	ErrInput  = errors.New("bad advantage input")
)

// MaxCoef bounds the magnitude of --mem-coef and of a const --mem-baseline. The
// memory rewards and the per-token advantages are stored as float32: P_mem − b, or
// λ·A^M with |A^M| at most the square root of the pool's size, past float32's 3.4e38
// is ±Inf, which the manifest's summary cannot hold and no update can train on (issue
// 45, --mem-coef 1e308). 1e6 is far beyond any useful setting (MemPO's λ is 1, b a
// probability) and keeps every value finite.
const MaxCoef = 1e6

// Epsilon is added to every standard deviation before dividing, as verl's
// compute_grpo_outcome_advantage does.
const Epsilon = 1e-6

// BaselineKind names how the memory reward's baseline b is chosen.
type BaselineKind string

const (
	// BaselineFull subtracts P_full, the answer probability given the complete un-pruned
	// history: the memory is rewarded for what it keeps relative to keeping everything.
	BaselineFull BaselineKind = "full"
	// BaselineContext subtracts P_ctx, the answer probability given the pruned context
	// the memory was written from (the turn's prompt: the previous memory and the
	// latest observation): the memory is rewarded for what it keeps of what it read.
	// It costs answer copies on the old pass's contexts instead of the stitched histories.
	BaselineContext BaselineKind = "context"
	// BaselineConst subtracts a fixed value.
	BaselineConst BaselineKind = "const"
	// BaselineNone uses P_mem as it is.
	BaselineNone BaselineKind = "none"
)

// Baseline is the --mem-baseline setting, written "full", "const:<v>" or "none"; it
// marshals to that same text, so the canonical config JSON holds the flag's spelling.
type Baseline struct {
	Kind  BaselineKind
	Value float64 // only for BaselineConst
}

// ParseBaseline reads a --mem-baseline value.
func ParseBaseline(s string) (Baseline, error) {
	switch s {
	case string(BaselineFull):
		return Baseline{Kind: BaselineFull}, nil
	case string(BaselineContext):
		return Baseline{Kind: BaselineContext}, nil
	case string(BaselineNone):
		return Baseline{Kind: BaselineNone}, nil
	}
	v, ok := strings.CutPrefix(s, string(BaselineConst)+":")
	if !ok {
		return Baseline{}, fmt.Errorf("--mem-baseline %q: want full, context, none or const:<value>: %w", s, ErrConfig)
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || !(math.Abs(f) <= MaxCoef) {
		return Baseline{}, fmt.Errorf("--mem-baseline %q: want const:<v> with v a number in [%g, %g] (e.g. const:0.5): %w",
			s, -MaxCoef, MaxCoef, ErrConfig)
	}
	return Baseline{Kind: BaselineConst, Value: f}, nil
}

// String is the flag spelling; ParseBaseline(b.String()) == b.
func (b Baseline) String() string {
	if b.Kind == BaselineConst {
		return string(BaselineConst) + ":" + strconv.FormatFloat(b.Value, 'g', -1, 64)
	}
	return string(b.Kind)
}

// MarshalText implements encoding.TextMarshaler.
func (b Baseline) MarshalText() ([]byte, error) {
	if _, err := ParseBaseline(b.String()); err != nil {
		return nil, err
	}
	return []byte(b.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (b *Baseline) UnmarshalText(text []byte) error {
	v, err := ParseBaseline(string(text))
	if err != nil {
		return err
	}
	*b = v
	return nil
}

// of returns b for memory turn t.
func (b Baseline) of(t Turn) float64 {
	switch b.Kind {
	case BaselineFull:
		return t.PFull
	case BaselineContext:
		return t.PCtx
	case BaselineConst:
		return b.Value
	}
	return 0
}

// Pool selects which memories are normalised together.
type Pool string

const (
	// PoolQuestion pools all (trajectory, turn) memories of a question (MemPO).
	PoolQuestion Pool = "question"
	// PoolTurn pools the memories of one question that share a turn index.
	PoolTurn Pool = "turn"
)

// ParsePool reads a --mem-pool value.
func ParsePool(s string) (Pool, error) {
	switch p := Pool(s); p {
	case PoolQuestion, PoolTurn:
		return p, nil
	}
	return "", fmt.Errorf("--mem-pool %q: want question or turn: %w", s, ErrConfig)
}

// Config is the advantage stage's configuration (DESIGN.md §7).
type Config struct {
	// NoStdNorm skips the division by the group's standard deviation (Dr.GRPO).
	NoStdNorm bool `json:"no_std_norm"`
	// MemBaseline is b in R^M = P_mem − b.
	MemBaseline Baseline `json:"mem_baseline"`
	// MemPool is the set of memories each memory advantage is normalised over.
	MemPool Pool `json:"mem_pool"`
	// MemCoef is λ, the weight of the memory advantage on the <mem> span; 0 is plain
	// GRPO. |λ| is at most MaxCoef, as is |b| of a const MemBaseline.
	MemCoef float64 `json:"mem_coef"`
	// MemContentOnly puts λ·A^M on the memory's content tokens only, not on the tokens
	// of its <mem> and </mem> tags. MemPO (the default, false) adds it on the whole span,
	// tags included, so the memory signal also trains when a turn opens and closes its
	// memory: a format decision (docs/memory-drift.md). Omitted from the config JSON when
	// false, so the cache keys of runs made before the option existed are unchanged.
	MemContentOnly bool `json:"mem_content_only,omitempty"`
}

// DefaultConfig is MemPO's setting.
func DefaultConfig() Config {
	return Config{MemBaseline: Baseline{Kind: BaselineFull}, MemPool: PoolQuestion, MemCoef: 1}
}

// Validate reports the first invalid field.
func (c Config) Validate() error {
	if _, err := ParseBaseline(c.MemBaseline.String()); err != nil {
		return err
	}
	if _, err := ParsePool(string(c.MemPool)); err != nil {
		return err
	}
	if !(math.Abs(c.MemCoef) <= MaxCoef) {
		return fmt.Errorf("--mem-coef %v: want a number in [%g, %g]: %w", c.MemCoef, -MaxCoef, MaxCoef, ErrConfig)
	}
	return nil
}
