package qwen2

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/mempo/mempo/model/sample"
	"github.com/mempo/mempo/model/torch/torchtest"
)

// TestDecoder drives a Decoder as an engine does, greedily: a prompt prefilled and
// joined alone, two more joining it after a step, rows kept as others finish, each
// finished row stored as a Past. Every row's tokens are Generate's for it alone; a
// prompt that extends a stored Past prefills from it to Generate's first token; and
// once the rows, the Pasts and the decoder are dropped no tensor is left, the fused
// projections included.
func TestDecoder(t *testing.T) {
	m := newTestModel(t, testConfig(), Options{})
	base := liveTensors()
	rng := rand.New(rand.NewPCG(3, 4))
	prompts := [][]int64{torchtest.RandomTokens(rng, 9, 97), torchtest.RandomTokens(rng, 4, 97), torchtest.RandomTokens(rng, 13, 97)}
	lengths := []int{6, 3, 8}
	want := make([][]int64, len(prompts))
	for i, p := range prompts {
		want[i] = generate(t, m, []Request{{Prompt: p}}, sample.Config{MaxNewTokens: lengths[i]})[0].Tokens
	}
	argmax := func(l []float32) int64 { return int64(slices.Index(l, slices.Max(l))) }
	vocab := m.Config.VocabSize

	d := m.NewDecoder()
	got := make([][]int64, len(prompts))
	prefill := func(i int) *Row {
		t.Helper()
		row, logits, err := d.Prefill(prompts[i], nil, 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		got[i] = append(got[i], argmax(logits))
		return row
	}
	running := []int{0} // running[r] is the prompt of row r
	if err := d.Join(nil, []*Row{prefill(0)}, 21); err != nil {
		t.Fatal(err)
	}
	var pasts []*Past
	defer func() {
		for _, p := range pasts {
			p.Drop()
		}
	}()
	for step := 0; d.Len() > 0; step++ {
		if step == 1 {
			if err := d.Join([]int{0}, []*Row{prefill(1), prefill(2)}, 21); err != nil {
				t.Fatal(err)
			}
			running = append(running, 1, 2)
		}
		tokens := make([]int64, d.Len())
		for r, i := range running {
			tokens[r] = got[i][len(got[i])-1]
		}
		logits, err := d.Step(tokens)
		if err != nil {
			t.Fatal(err)
		}
		var keep []int
		for r, i := range running {
			got[i] = append(got[i], argmax(logits[r*vocab:(r+1)*vocab]))
			if len(got[i]) < lengths[i] {
				keep = append(keep, r)
				continue
			}
			ids := slices.Concat(prompts[i], got[i][:len(got[i])-1])
			if _, err := d.Past(r, ids[1:]); err == nil || !strings.Contains(err.Error(), "holds") {
				t.Errorf("Past of too few tokens = %v, want an error", err)
			}
			p, err := d.Past(r, ids)
			if err != nil {
				t.Fatal(err)
			}
			pasts = append(pasts, p)
		}
		if err := d.Keep(keep); err != nil {
			t.Fatal(err)
		}
		next := make([]int, len(keep))
		for j, r := range keep {
			next[j] = running[r]
		}
		running = next
		if d.Cap() != 21 && d.Len() > 0 {
			t.Errorf("Cap = %d, want 21", d.Cap())
		}
	}
	for i := range prompts {
		if diff := cmp.Diff(want[i], got[i]); diff != "" {
			t.Errorf("prompt %d: tokens (-Generate +decoder):\n%s", i, diff)
		}
	}

	// The next turn of prompt 2 from its Past (the last one stored).
	p := pasts[len(pasts)-1]
	next := slices.Concat(p.Tokens(), torchtest.RandomTokens(rng, 5, 97))
	alone := generate(t, m, []Request{{Prompt: next}}, sample.Config{MaxNewTokens: 1})[0]
	row, logits, err := d.Prefill(next, p, p.Len(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if tok := argmax(logits); tok != alone.Tokens[0] {
		t.Errorf("prefill from a Past: token %d, want %d", tok, alone.Tokens[0])
	}
	stored, err := row.Past()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(stored.Tokens(), next) {
		t.Errorf("a row's Past holds %v, want its prompt", stored.Tokens())
	}
	stored.Drop()

	for _, tt := range []struct {
		name string
		err  func() error
		want string
	}{
		{"empty prompt", func() error { _, _, err := d.Prefill(nil, nil, 0, nil); return err }, "empty prompt"},
		{"token outside the vocabulary", func() error { _, _, err := d.Prefill([]int64{1, 97}, nil, 0, nil); return err }, "outside the vocabulary"},
		{"a past of other tokens", func() error { _, _, err := d.Prefill(slices.Concat([]int64{96}, next), p, 3, nil); return err }, "cannot serve"},
		{"a past serving the whole prompt", func() error { _, _, err := d.Prefill(p.Tokens(), p, p.Len(), nil); return err }, "cannot serve"},
		{"a scored prompt from a past", func() error { _, _, err := d.Prefill(next, p, 3, &PromptScore{}); return err }, "runs whole"},
		{"step without rows", func() error { _, err := d.Step([]int64{1}); return err }, "running rows"},
		{"keep of a row not running", func() error { return d.Keep([]int{0}) }, "keep: row 0 of 0"},
		{"join of a row of another decoder", func() error {
			other, _, err := m.NewDecoder().Prefill(next, nil, 0, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer other.Drop()
			return d.Join(nil, []*Row{other}, 64)
		}, "another decoder"},
		{"join over capacity", func() error { return d.Join(nil, []*Row{row}, len(next)-1) }, "capacity"},
	} {
		if err := tt.err(); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want an error containing %q", tt.name, err, tt.want)
		}
	}
	row.Drop() // taken by the failed Join: a second Drop does nothing
	d.Close()
	for _, p := range pasts {
		p.Drop()
	}
	if n := liveTensors(); n != base {
		t.Errorf("%d live tensors after the rows, the Pasts and the decoder were dropped, want %d", n, base)
	}
}
