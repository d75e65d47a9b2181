package advantage

import (
	"bytes"
	"math"
)

// All sums below run left to right over the slice as given, in float64; callers pass
// values in a fixed order (samples ascending, then turns ascending), so results are
// bit-for-bit reproducible.

// meanStd returns the mean and the unbiased (n−1) standard deviation of xs (len ≥ 2), and
// whether all values are equal. Equality is tested directly rather than by std == 0, since
// the rounded mean of equal values need not equal them and would leave a ~1e-17 residue.
func meanStd(xs []float64) (mean, std float64, equal bool) {
	sum := 0.0
	equal = true
	for _, x := range xs {
		sum += x
		equal = equal && x == xs[0]
	}
	mean = sum / float64(len(xs))
	ss := 0.0
	for _, x := range xs {
		d := x - mean
		ss += d * d
	}
	return mean, math.Sqrt(ss / float64(len(xs)-1)), equal
}

// GRPO returns the outcome advantages of one group (the n trajectories of a question):
//
//	A_i = (R_i − mean) / (std + 1e-6)     std unbiased (n−1)
//	A_i =  R_i − mean                     when noStdNorm (Dr.GRPO)
//
// as verl's compute_grpo_outcome_advantage. A group of one has mean 0 and std 1 (so
// A = R/(1+1e-6), or R without std normalisation). A group whose rewards are all equal gets
// exactly 0 and reports zeroSpread. GRPO: arXiv 2402.03300; Dr.GRPO: arXiv 2503.20783.
func GRPO(rewards []float64, noStdNorm bool) (adv []float64, zeroSpread bool) {
	adv = make([]float64, len(rewards))
	if len(rewards) == 0 {
		return adv, false
	}
	mean, std := 0.0, 1.0
	if len(rewards) > 1 {
		var equal bool
		mean, std, equal = meanStd(rewards)
		if equal {
			return adv, true
		}
	}
	for i, r := range rewards {
		if noStdNorm {
			adv[i] = r - mean
		} else {
			adv[i] = (r - mean) / (std + Epsilon)
		}
	}
	return adv, false
}

// MemoryAdvantage returns A^M = (R^M − mean) / (std + 1e-6) over one pool of memory rewards
// (DESIGN.md §7, MemPO arXiv 2603.00680), std unbiased. A pool with fewer than two values or
// with all values equal carries no comparison, so it gets zeros and reports degenerate.
func MemoryAdvantage(rewards []float64) (adv []float64, degenerate bool) {
	adv = make([]float64, len(rewards))
	if len(rewards) < 2 {
		return adv, true
	}
	mean, std, equal := meanStd(rewards)
	if equal {
		return adv, true
	}
	for i, r := range rewards {
		adv[i] = (r - mean) / (std + Epsilon)
	}
	return adv, false
}

// Span is a [Start, End) range of response tokens.
type Span struct {
	Start int `json:"start"`
	End   int `json:"end"`
}

// TokenAdvantages returns the per-token advantages of one turn's response of n tokens:
// outcome + coef·memory on the tokens of mem (the <mem>…</mem> span, tags included), outcome
// elsewhere. Each value is summed in float64 and rounded once to float32. mem must lie in
// [0, n]; a nil mem means the turn has no memory.
func TokenAdvantages(n int, outcome float64, mem *Span, coef, memory float64) []float32 {
	out := make([]float32, n)
	plain := float32(outcome)
	for i := range out {
		out[i] = plain
	}
	if mem != nil {
		with := float32(outcome + coef*memory)
		for i := mem.Start; i < mem.End; i++ {
			out[i] = with
		}
	}
	return out
}

// ContentSpan returns the content tokens of a memory span: of the tokens mem covers in a
// response whose tokens decode to pieces, those whose bytes lie wholly after the span's
// open tag and before its close tag. A token that holds tag bytes (a tag split over
// tokens, or a token holding "</mem>" and the next block's first bytes) is not content,
// nor is a token without bytes at either end. ok is false when the text of mem does not
// start with open and end with close (a span that is not a memory block of this
// protocol); an empty content span {s, s} is a memory with nothing between its tags.
func ContentSpan(pieces []string, mem Span, open, close string) (content Span, ok bool) {
	if mem.Start < 0 || mem.End > len(pieces) || mem.End <= mem.Start {
		return Span{}, false
	}
	var text []byte
	offs := make([]int, 0, mem.End-mem.Start+1)
	for _, p := range pieces[mem.Start:mem.End] {
		offs = append(offs, len(text))
		text = append(text, p...)
	}
	offs = append(offs, len(text))
	// A token the span shares with text before or after the block holds bytes outside the
	// tags; the tags are looked up inside the span's text.
	lo := bytes.Index(text, []byte(open))
	hi := bytes.LastIndex(text, []byte(close))
	if lo < 0 || hi < lo+len(open) {
		return Span{}, false
	}
	from, to := lo+len(open), hi
	content = Span{Start: -1, End: -1}
	for i := 0; i < len(offs)-1; i++ {
		a, b := offs[i], offs[i+1]
		if b > a && a >= from && b <= to {
			if content.Start < 0 {
				content.Start = mem.Start + i
			}
			content.End = mem.Start + i + 1
		}
	}
	if content.Start < 0 {
		// Nothing wholly inside: an empty span right after the open tag's last token.
		i := 0
		for i < len(offs)-1 && offs[i+1] <= from {
			i++
		}
		return Span{Start: mem.Start + i, End: mem.Start + i}, true
	}
	return content, true
}
