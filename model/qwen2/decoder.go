package qwen2

import (
	"errors"
	"fmt"
	"slices"

	"github.com/mempo/mempo/model/sample"
	"github.com/mempo/mempo/model/torch"
)

// Decoder is a running batch whose rows change between decode steps, what a
// continuous-batching engine drives: Prefill runs a prompt as a Row of its own, Join
// packs rows into the running batch, Step feeds every running row its newest token
// and returns each row's logits, Keep retains some rows, and Past stores a row's keys
// and values. Admission, sampling and stop rules are the caller's.
//
// The running rows share one Cache, each packed to its own tokens from slot 0 (see
// packRows); rows share slot positions and the mask says which slots each row holds,
// as in Batch. Every pass is the one Generate runs for the same shapes: a prompt
// prefilled alone is Generate's batch of one, and a step feeds only the rows' newest
// tokens through projections fused while the decoder holds any row, running or
// prefilled (see fused); they are freed when it holds none.
//
// A Decoder is used from one goroutine. Its tensor work runs on the torch thread
// (torch.DoNoGrad); a libtorch failure is returned as an error, after which Close
// (and dropping the Rows not joined) leaves the decoder empty and usable.
type Decoder struct {
	m  *Model
	fs []fused
	// cache holds the running rows' keys and values (nil when none run); valid[r] is
	// the slots row r holds and held[r] how many.
	cache *Cache
	valid [][]bool
	held  []int
	rows  int // prefilled Rows not yet joined or dropped
}

// Row is a prompt's keys and values after Decoder.Prefill, on its own until Join
// takes it into the running batch. The caller drops a Row it does not join.
type Row struct {
	d     *Decoder
	ids   []int64
	cache *Cache // one row, Len() == len(ids)
}

// PromptScore asks Decoder.Prefill to score the prompt: the log-prob of every prompt
// token after the first under softmax(logits/Temperature) (T = 1 when 0) and the Top
// most likely tokens at its position (sample.Score). Prefill fills LogProbs and
// TopTokens.
type PromptScore struct {
	Temperature float64
	Top         int
	LogProbs    []float32
	TopTokens   [][]sample.Logprob
}

// NewDecoder returns an empty decoder over m.
func (m *Model) NewDecoder() *Decoder { return &Decoder{m: m} }

// Len is the number of running rows.
func (d *Decoder) Len() int { return len(d.held) }

// Cap is the slots each running row may reach: the capacity of the last Join.
func (d *Decoder) Cap() int {
	if d.cache == nil {
		return 0
	}
	return int(d.cache.cap)
}

// Prefill runs prompt as a row of its own, exactly as Generate runs a batch of one,
// and returns the row and its last token's float32 logits, [vocab] on the host. When
// past is set, its first reuse tokens, which must begin prompt and leave at least its
// last token to run, are copied instead of run (see Past); score, when set, is filled
// with the prompt's log-probs, which needs the whole prompt run (past nil).
func (d *Decoder) Prefill(prompt []int64, past *Past, reuse int, score *PromptScore) (row *Row, logits []float32, err error) {
	switch {
	case len(prompt) == 0:
		return nil, nil, errors.New("empty prompt")
	case past != nil && (past.cache == nil || reuse < 1 || reuse > min(past.Len(), len(prompt)-1) || !slices.Equal(past.ids[:reuse], prompt[:reuse])):
		return nil, nil, fmt.Errorf("a past of %d tokens cannot serve %d tokens of a prompt of %d", past.Len(), reuse, len(prompt))
	case past != nil && score != nil:
		return nil, nil, errors.New("a scored prompt runs whole, not from a past")
	}
	if err := d.m.Config.checkTokens(prompt); err != nil {
		return nil, nil, err
	}
	defer d.idle()
	defer torch.Catch(fmt.Sprintf("prefill of a prompt of %d tokens", len(prompt)), &err)
	torch.DoNoGrad(func() {
		if d.fs == nil {
			d.fs = d.m.fuse()
		}
		cache := d.m.NewCache(1, len(prompt))
		keep := false
		defer func() {
			if !keep {
				cache.Drop()
			}
		}()
		var b Batch
		if past != nil {
			cache.copyPast(0, past, reuse)
			cache.len = int64(reuse)
			b = NewBatch([][]int64{prompt[reuse:]}, []int{reuse}, [][]bool{slices.Repeat([]bool{true}, reuse)}, reuse)
		} else {
			b = NewBatch([][]int64{prompt}, []int{0}, nil, 0)
		}
		var see func(h torch.Raw)
		if score != nil {
			see = func(h torch.Raw) {
				score.LogProbs, score.TopTokens = d.m.scorePrompt(h, prompt, score.Temperature, score.Top)
			}
		}
		logits = d.m.lastLogitsSeeing(b, cache, d.fs, see)
		row, keep = &Row{d: d, ids: prompt, cache: cache}, true
		d.rows++
	})
	return row, logits, nil
}

// Past copies the row's keys and values into a Past of its prompt; the row stays.
func (r *Row) Past() (p *Past, err error) {
	if r.cache == nil {
		return nil, errors.New("past of a dropped row")
	}
	defer torch.Catch(fmt.Sprintf("past of a row of %d tokens", len(r.ids)), &err)
	torch.DoNoGrad(func() {
		p = r.d.m.keepPast(r.cache, 0, slices.Repeat([]bool{true}, len(r.ids)), r.ids)
	})
	return p, nil
}

// Drop frees the row; a second Drop, or one on nil, does nothing.
func (r *Row) Drop() {
	if r == nil || r.cache == nil {
		return
	}
	torch.Do(r.cache.Drop)
	r.cache = nil
	r.d.rows--
	r.d.idle()
}

// Join replaces the running batch with the running rows keep, in that order, followed
// by rows, each packed from slot 0, in a cache of capacity slots per row (at least the
// most any row holds); the running rows not kept are freed, and rows are taken: they
// are dropped whatever the outcome. On an error the decoder holds no running rows.
func (d *Decoder) Join(keep []int, rows []*Row, capacity int) (err error) {
	defer func() {
		for _, r := range rows {
			if r.d == d {
				r.Drop()
			}
		}
		if err != nil {
			d.drop()
		}
		d.idle()
	}()
	var parts []rowSlots
	for _, k := range keep {
		if k < 0 || k >= d.Len() {
			return fmt.Errorf("join: row %d of %d running", k, d.Len())
		}
		var slots []int
		for s, ok := range d.valid[k] {
			if ok {
				slots = append(slots, s)
			}
		}
		parts = append(parts, rowSlots{from: d.cache, row: k, slots: slots})
	}
	for _, r := range rows {
		if r.d != d || r.cache == nil {
			return errors.New("join: a row dropped or prefilled by another decoder")
		}
		parts = append(parts, rowSlots{from: r.cache, row: 0, slots: seq(len(r.ids))})
	}
	width := 0
	for _, p := range parts {
		width = max(width, len(p.slots))
	}
	if width > capacity {
		return fmt.Errorf("join: rows of up to %d slots into a capacity of %d", width, capacity)
	}
	if len(parts) == 0 {
		d.drop()
		return nil
	}
	defer torch.Catch(fmt.Sprintf("join of %d running rows and %d new", len(keep), len(rows)), &err)
	torch.DoNoGrad(func() {
		cache := d.m.packRows(parts, capacity)
		d.drop()
		d.cache = cache
		d.valid, d.held = make([][]bool, len(parts)), make([]int, len(parts))
		for i, p := range parts {
			d.valid[i] = make([]bool, width)
			for s := range len(p.slots) {
				d.valid[i][s] = true
			}
			d.held[i] = len(p.slots)
		}
	})
	return nil
}

// Keep retains the running rows keep, in that order, and frees the others. On an
// error the decoder holds no running rows.
func (d *Decoder) Keep(keep []int) (err error) {
	defer d.idle()
	for _, k := range keep {
		if k < 0 || k >= d.Len() {
			d.drop()
			return fmt.Errorf("keep: row %d of %d running", k, d.Len())
		}
	}
	if len(keep) == 0 {
		d.drop()
		return nil
	}
	defer func() {
		if err != nil {
			d.drop()
		}
	}()
	defer torch.Catch(fmt.Sprintf("keep of %d rows of %d", len(keep), d.Len()), &err)
	idx := make([]int64, len(keep))
	valid, held := make([][]bool, len(keep)), make([]int, len(keep))
	for j, k := range keep {
		idx[j], valid[j], held[j] = int64(k), d.valid[k], d.held[k]
	}
	torch.DoNoGrad(func() { d.cache.Keep(idx) })
	d.valid, d.held = valid, held
	return nil
}

// Step feeds running row r its newest token, tokens[r], after the tokens it holds and
// returns the float32 logits of every row, [rows·vocab] on the host; each row then
// holds one more token.
func (d *Decoder) Step(tokens []int64) (logits []float32, err error) {
	if len(tokens) != d.Len() || d.Len() == 0 {
		return nil, fmt.Errorf("step: %d tokens for %d running rows", len(tokens), d.Len())
	}
	if err := d.m.Config.checkTokens(tokens); err != nil {
		return nil, fmt.Errorf("step: %w", err)
	}
	defer torch.Catch(fmt.Sprintf("step of %d rows", d.Len()), &err)
	torch.DoNoGrad(func() {
		rows := make([][]int64, len(tokens))
		for r := range tokens {
			rows[r] = tokens[r : r+1]
		}
		b := NewBatch(rows, d.held, d.valid, d.cache.Len())
		logits = d.m.lastLogits(b, d.cache, d.fs)
		d.valid = b.Valid
		for r := range d.held {
			d.held[r]++
		}
	})
	return logits, nil
}

// Past copies running row r's keys and values into a Past of ids, the tokens it
// holds (its prompt and every token fed after it).
func (d *Decoder) Past(r int, ids []int64) (p *Past, err error) {
	switch {
	case r < 0 || r >= d.Len():
		return nil, fmt.Errorf("past: row %d of %d running", r, d.Len())
	case len(ids) != d.held[r]:
		return nil, fmt.Errorf("past: row %d holds %d tokens, not %d", r, d.held[r], len(ids))
	}
	defer torch.Catch(fmt.Sprintf("past of row %d", r), &err)
	torch.DoNoGrad(func() {
		p = d.m.keepPast(d.cache, r, d.valid[r], ids)
	})
	return p, nil
}

// Close frees the running rows, and the fused projections unless Rows not yet
// joined remain (dropping the last frees them); the decoder stays usable.
func (d *Decoder) Close() {
	d.drop()
	d.idle()
}

// drop frees the running rows.
func (d *Decoder) drop() {
	if d.cache != nil {
		torch.Do(d.cache.Drop)
	}
	d.cache, d.valid, d.held = nil, nil, nil
}

// idle frees the fused projections once the decoder holds no rows.
func (d *Decoder) idle() {
	if d.fs != nil && d.cache == nil && d.rows == 0 {
		torch.Do(func() { freeFused(d.fs) })
		d.fs = nil
	}
}

// seq is 0, 1, …, n-1.
func seq(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}
