package qwen2

import (
	"fmt"
	"math"

	"github.com/mempo/mempo/model/torch"
	"github.com/sugarme/gotch"
	"github.com/sugarme/gotch/ts"
)

// Batch is the host side of one forward call: Rows rows of new tokens,
// right-padded to Width, written after Past cache slots.
//
// Rows of different lengths share cache slots: row r's tokens sit in slots where
// Valid[r] is true and each row carries its own positions, so padding never shifts a
// row's positions and a row's attention reads exactly its own tokens. This lets
// prompts of different lengths decode together without left-padding.
type Batch struct {
	Rows, Width, Past int
	IDs               []int64  // [Rows·Width]; padding is token 0
	Pos               []int64  // [Rows·Width]; padding repeats the row's last position
	Valid             [][]bool // [Rows][Past+Width]: slot k of row r holds one of its tokens
}

// NewBatch lays out tokens[r] (the new tokens of row r, at least one) starting at
// position start[r], after past slots whose validity is valid[r] (nil when past is 0).
func NewBatch(tokens [][]int64, start []int, valid [][]bool, past int) Batch {
	b := Batch{Rows: len(tokens), Past: past}
	for _, t := range tokens {
		b.Width = max(b.Width, len(t))
	}
	b.IDs = make([]int64, b.Rows*b.Width)
	b.Pos = make([]int64, b.Rows*b.Width)
	b.Valid = make([][]bool, b.Rows)
	for r, t := range tokens {
		if len(t) == 0 {
			panic(fmt.Sprintf("batch row %d has no tokens", r))
		}
		row := make([]bool, past+b.Width)
		if past > 0 {
			copy(row, valid[r][:past])
		}
		for j := range b.Width {
			i := r*b.Width + j
			if j < len(t) {
				b.IDs[i] = t[j]
				b.Pos[i] = int64(start[r] + j)
				row[past+j] = true
			} else {
				b.Pos[i] = int64(start[r] + len(t) - 1)
			}
		}
		b.Valid[r] = row
	}
	return b
}

// Mask is the attention mask [Rows·Width·(Past+Width)] (row-major [row, query,
// key]): query j of a row (slot Past+j) may read slot k when k ≤ Past+j and the row
// holds a token there. A padding query still sees its row's real tokens, so no mask
// row is empty and softmax never sees all -inf.
func (b Batch) Mask() []bool {
	keys := b.Past + b.Width
	out := make([]bool, b.Rows*b.Width*keys)
	for r := range b.Rows {
		for j := range b.Width {
			base := (r*b.Width + j) * keys
			for k := 0; k <= b.Past+j; k++ {
				out[base+k] = b.Valid[r][k]
			}
		}
	}
	return out
}

// bias is Mask as the additive attention bias SDPA builds from a boolean mask: 0
// where a query may read a slot and -inf elsewhere, same layout.
func (b Batch) bias() []float32 {
	keys := b.Past + b.Width
	out := make([]float32, b.Rows*b.Width*keys)
	inf := float32(math.Inf(-1))
	for r := range b.Rows {
		for j := range b.Width {
			row := out[(r*b.Width+j)*keys : (r*b.Width+j+1)*keys]
			for k := range row {
				if k > b.Past+j || !b.Valid[r][k] {
					row[k] = inf
				}
			}
		}
	}
	return out
}

// tensors converts the batch to ids, pos: [rows, width] int64 and mask:
// [rows, 1, width, past+width] bool on the model's device.
func (m *Model) tensors(b Batch) (ids, pos, mask *ts.Tensor) {
	shape := []int64{int64(b.Rows), int64(b.Width)}
	ids = torch.FromHost(b.IDs, shape, m.device)
	pos = torch.FromHost(b.Pos, shape, m.device)
	mask = torch.FromHost(b.Mask(), []int64{int64(b.Rows), 1, int64(b.Width), int64(b.Past + b.Width)}, m.device)
	return ids, pos, mask
}

// inputs is tensors with the mask as its bias (see bias) in the model dtype, the
// form hidden takes.
func (m *Model) inputs(b Batch) (ids, pos, bias torch.Raw) {
	shape := []int64{int64(b.Rows), int64(b.Width)}
	ids = torch.RawFromHost(b.IDs, shape, m.device)
	pos = torch.RawFromHost(b.Pos, shape, m.device)
	bias = torch.RawFromHost(b.bias(), []int64{int64(b.Rows), 1, int64(b.Width), int64(b.Past + b.Width)}, m.device)
	if m.dtype != gotch.Float {
		f := bias
		defer f.Free()
		bias = f.ToDType(m.dtype)
	}
	return ids, pos, bias
}

// checkTokens validates a row of token ids against the vocabulary.
func (c Config) checkTokens(ids []int64) error {
	for i, id := range ids {
		if id < 0 || id >= int64(c.VocabSize) {
			return fmt.Errorf("token %d at index %d is outside the vocabulary [0, %d): tokenizer/model vocab mismatch", id, i, c.VocabSize)
		}
	}
	return nil
}
