package httpserve

import (
	"errors"
	"io"
	"sync/atomic"
)

// ErrBusy marks a request body read past its server's Budget.
var ErrBusy = errors.New("the request bodies being read hold the server's budget for them")

// Budget bounds the bytes of the request bodies a server is reading at once, across
// requests. It lets a server read a body before the request takes one of its
// in-flight slots, so that clients stalling mid-body hold no slot, while the memory of
// the bodies being read stays bounded: a stalled client holds only the bytes it sent.
type Budget struct {
	used atomic.Int64
	max  int64
}

// NewBudget is a budget of max bytes.
func NewBudget(max int64) *Budget { return &Budget{max: max} }

// Used is the bytes counted now.
func (b *Budget) Used() int64 { return b.used.Load() }

// Reader counts the bytes read from r against b until Release; a read that takes b
// past its max fails with ErrBusy.
func (b *Budget) Reader(r io.Reader) *BudgetReader { return &BudgetReader{r: r, b: b} }

// BudgetReader is a body read under a Budget.
type BudgetReader struct {
	r       io.Reader
	b       *Budget
	counted int64
}

func (r *BudgetReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	r.counted += int64(n)
	if r.b.used.Add(int64(n)) > r.b.max {
		return 0, ErrBusy
	}
	return n, err
}

// Counted is the bytes read so far.
func (r *BudgetReader) Counted() int64 { return r.counted }

// Release gives the bytes read back to the budget, once the request is done with them.
func (r *BudgetReader) Release() {
	r.b.used.Add(-r.counted)
	r.counted = 0
}
