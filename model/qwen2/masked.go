package qwen2

import (
	"fmt"
	"runtime"

	"github.com/mempo/mempo/model/torch"
	"github.com/sugarme/gotch"
)

// Branch is a continuation of the first Prefix tokens of a Tree's trunk.
type Branch struct {
	Prefix int     // trunk tokens the branch continues, 0 < Prefix <= len(Trunk)
	IDs    []int64 // the branch's own tokens
	// From is the first branch token to score: BranchLogProbs returns
	// log π(IDs[j] | Trunk[:Prefix], IDs[:j]) for j in [From, len(IDs)).
	From int
}

// Tree is a trunk sequence with branches that each continue one prefix of it. Each
// branch is scored as if it followed its prefix alone: a branch token attends to
// Trunk[:Prefix] and to the earlier tokens of its own branch and sits at position
// Prefix+j. The trunk runs once into a KV cache that every branch reads (see
// branchBatch), so many continuations of one context (the memory pass's answer copies
// after every turn of a trajectory, or every memory of a prompt) cost one forward over
// the shared tokens plus their own tokens, instead of one per continuation.
type Tree struct {
	Trunk    []int64
	Branches []Branch
}

func (m *Model) checkTree(t Tree) error {
	if len(t.Trunk) == 0 {
		return fmt.Errorf("empty trunk: a branch needs a token to condition on")
	}
	if len(t.Trunk) > m.Config.MaxPositions {
		return fmt.Errorf("trunk of %d tokens exceeds max_position_embeddings %d: shorten the sequence", len(t.Trunk), m.Config.MaxPositions)
	}
	if err := m.Config.checkTokens(t.Trunk); err != nil {
		return fmt.Errorf("trunk: %w", err)
	}
	for i, b := range t.Branches {
		switch {
		case b.Prefix < 1 || b.Prefix > len(t.Trunk):
			return fmt.Errorf("branch %d: prefix %d outside the trunk's %d tokens", i, b.Prefix, len(t.Trunk))
		case b.From < 0 || b.From > len(b.IDs):
			return fmt.Errorf("branch %d: from %d outside its %d tokens", i, b.From, len(b.IDs))
		case b.Prefix+len(b.IDs) > m.Config.MaxPositions:
			return fmt.Errorf("branch %d: prefix %d + %d tokens exceed max_position_embeddings %d: shorten the sequence",
				i, b.Prefix, len(b.IDs), m.Config.MaxPositions)
		}
		if err := m.Config.checkTokens(b.IDs); err != nil {
			return fmt.Errorf("branch %d: %w", i, err)
		}
	}
	return nil
}

// BranchLogProbs scores every branch of every tree without gradients:
// out[tree][branch][j-From] = log π(IDs[j] | Trunk[:Prefix], IDs[:j]). Trees are
// batched to cfg.TokenBudget (rows × longest trunk, longest first; a trunk longer than
// the budget gets a batch of its own), and so are the branch rows over each batch's trunks;
// logits go through the chunked selective log-softmax of LogProbs, so [tokens, vocab]
// never exists.
func (m *Model) BranchLogProbs(trees []Tree, cfg ScoreConfig) (out [][][]float32, err error) {
	cfg = cfg.withDefaults()
	for i, t := range trees {
		if err := m.checkTree(t); err != nil {
			return nil, fmt.Errorf("branch scores: tree %d: %w", i, err)
		}
	}
	// libtorch keeps grad mode per OS thread: pinned, every op below runs without it.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	defer torch.SetGrad(torch.SetGrad(false))
	out = make([][][]float32, len(trees))
	all := make([]int, len(trees))
	for i := range all {
		all[i] = i
	}
	trunk := func(i int) int { return len(trees[i].Trunk) }
	for _, batch := range BudgetBatches(all, trunk, cfg.TokenBudget) {
		sub := make([]Tree, len(batch))
		for j, i := range batch {
			sub[j] = trees[i]
		}
		vals, err := m.branchBatch(sub, cfg)
		if err != nil {
			return nil, fmt.Errorf("branch scores: batch of trees %v: %w", batch, err)
		}
		off := 0
		for _, i := range batch {
			t := trees[i]
			out[i] = make([][]float32, len(t.Branches))
			for b, br := range t.Branches {
				n := len(br.IDs) - br.From
				out[i][b] = vals[off : off+n : off+n]
				off += n
			}
		}
	}
	return out, nil
}

// treeChunk is how many trunk slots one forward step of branchBatch computes: the
// trunks run through a KV cache chunk by chunk, so the attention intermediates stay
// [rows, heads, chunk, width] instead of [rows, heads, width, width]. Measured on the
// tiny preset when trunk and branches still shared one packed row, 16 stitched
// trajectories of 870 tokens with 5 answer copies each, token budget 8192, fastest of
// 3 on 2 shared CPU cores: 1.91 s in one forward, 1.51 s in chunks of 512, 1.19 s of
// 256, 1.24 s of 128. A variable so tests can check that any chunking gives the same
// log-probs.
var treeChunk = 256

// branchBatch scores a batch of trees in two steps. The trunks run as one
// right-padded batch, treeChunk slots at a time, into a KV cache; then the branches run
// as rows over a copy of their tree's cached trunk, each row seeing trunk slots before
// its Prefix and its own tokens. Every trunk token is computed once however many
// branches continue it, no branch attends to another, and the scored log-probs come
// back flattened tree by tree, branch by branch.
func (m *Model) branchBatch(trees []Tree, cfg ScoreConfig) (vals []float32, err error) {
	defer torch.Catch(fmt.Sprintf("branch log-probs of %d trees", len(trees)), &err)
	var brs []treeBranch
	n := 0
	for i, t := range trees {
		for _, b := range t.Branches {
			brs = append(brs, treeBranch{tree: i, Branch: b, out: n})
			n += len(b.IDs) - b.From
		}
	}
	if n == 0 {
		return nil, nil
	}
	cache, trunkStates := m.trunks(trees, brs)
	defer cache.Drop()
	parts, order := []torch.Raw{trunkStates.h}, trunkStates.out
	defer func() { torch.Free(parts...) }()
	for _, sub := range branchBatches(brs, cache.Len(), cfg.TokenBudget) {
		h, out := m.branches(cache, sub)
		parts, order = append(parts, h), append(order, out...)
	}
	all := torch.RawCat(parts, 0) // [n, hidden] in order's order
	inverse := make([]int64, n)   // inverse[i] = row of all predicting scored token i
	target := make([]int64, n)
	for k, i := range order {
		inverse[i] = int64(k)
	}
	for _, b := range brs {
		copy(target[b.out:], b.IDs[b.From:])
	}
	inv := torch.RawFromHost(inverse, []int64{int64(n)}, m.device)
	sel := all.IndexSelect(0, inv)
	torch.Free(all, inv)
	defer sel.Free()
	tgt := torch.RawFromHost(target, []int64{int64(n), 1}, m.device)
	defer tgt.Free()
	cfg.Entropy = false
	lp, _ := m.chunkLogProbs(sel, tgt, cfg)
	defer lp.Free()
	return torch.ToHost[float32](lp), nil
}

// treeBranch is a branch of tree tree of a batch whose first scored token is scored
// token out of the batch.
type treeBranch struct {
	Branch
	tree, out int
}

// states are hidden states [len(out), hidden]: row k predicts scored token out[k].
type states struct {
	h   torch.Raw
	out []int
}

// trunks runs the trees' trunks as rows of one right-padded batch into a new KV cache,
// treeChunk slots at a time, and returns the cache and the hidden states of the trunk
// slots that predict a branch's first token (for branches scored from token 0). A
// padding slot attends to slot 0 only, so no softmax row is all -inf.
func (m *Model) trunks(trees []Tree, brs []treeBranch) (*Cache, states) {
	rows, w := len(trees), 0
	for _, t := range trees {
		w = max(w, len(t.Trunk))
	}
	cache := m.NewCache(rows, w)
	var parts []torch.Raw
	var out []int
	for s := 0; s < w; s += treeChunk {
		k := min(treeChunk, w-s)
		ids, pos := make([]int64, rows*k), make([]int64, rows*k)
		mask := make([]bool, rows*k*(s+k))
		for r, t := range trees {
			for q := s; q < s+k; q++ {
				i := r*k + q - s
				row := mask[i*(s+k) : (i+1)*(s+k)]
				if q >= len(t.Trunk) {
					pos[i], row[0] = int64(len(t.Trunk)-1), true
					continue
				}
				ids[i], pos[i] = t.Trunk[q], int64(q)
				for key := 0; key <= q; key++ {
					row[key] = true
				}
			}
		}
		var sel []int64 // flat indices into this chunk's [rows·k] hidden states
		for _, b := range brs {
			if q := b.Prefix - 1; b.From == 0 && q >= s && q < s+k {
				sel = append(sel, int64(b.tree*k+q-s))
				out = append(out, b.out)
			}
		}
		shape := []int64{int64(rows), int64(k)}
		it := torch.RawFromHost(ids, shape, m.device)
		pt := torch.RawFromHost(pos, shape, m.device)
		mt := torch.RawFromHost(mask, []int64{int64(rows), 1, int64(k), int64(s + k)}, m.device)
		bias := maskBias(mt, m.dtype)
		h := m.hidden(it, pt, bias, cache, nil)
		torch.Free(it, pt, mt, bias)
		if len(sel) > 0 {
			parts = append(parts, selectStates(h, sel, m.device))
		}
		h.Free()
	}
	if len(parts) == 0 {
		return cache, states{h: torch.RawEmpty([]int64{0, int64(m.Config.HiddenSize)}, m.dtype, m.device)}
	}
	return cache, states{h: catFree(parts), out: out}
}

// branches runs brs as rows over copies of their trees' rows of the trunk cache and
// returns the hidden states of the branch slots that predict scored tokens: slot j-1
// predicts token j, for j >= max(From, 1).
func (m *Model) branches(trunk *Cache, brs []treeBranch) (torch.Raw, []int) {
	rows := make([]int64, len(brs))
	tokens := make([][]int64, len(brs))
	start := make([]int, len(brs))
	valid := make([][]bool, len(brs))
	for r, b := range brs {
		rows[r], tokens[r], start[r] = int64(b.tree), b.IDs, b.Prefix
		valid[r] = make([]bool, trunk.Len())
		for k := range b.Prefix {
			valid[r][k] = true
		}
	}
	bt := NewBatch(tokens, start, valid, trunk.Len())
	cache := trunk.copyRows(rows, bt.Past+bt.Width)
	defer cache.Drop()
	ids, pos, bias := m.inputs(bt)
	h := m.hidden(ids, pos, bias, cache, nil)
	torch.Free(ids, pos, bias)
	defer h.Free()
	var sel []int64
	var out []int
	for r, b := range brs {
		for j := max(b.From, 1); j < len(b.IDs); j++ {
			sel = append(sel, int64(r*bt.Width+j-1))
			out = append(out, b.out+j-b.From)
		}
	}
	if len(sel) == 0 {
		return torch.RawEmpty([]int64{0, int64(m.Config.HiddenSize)}, m.dtype, m.device), nil
	}
	return selectStates(h, sel, m.device), out
}

// branchBatches splits brs, in order, into batches of at most budget rows × (past +
// longest branch) slots; a branch that alone exceeds it gets a batch of its own.
func branchBatches(brs []treeBranch, past, budget int) [][]treeBranch {
	order := make([]int, len(brs))
	for i := range order {
		order[i] = i
	}
	var out [][]treeBranch
	for _, batch := range SplitBudget(order, func(i int) int { return past + len(brs[i].IDs) }, budget) {
		sub := make([]treeBranch, len(batch))
		for k, i := range batch {
			sub[k] = brs[i]
		}
		out = append(out, sub)
	}
	return out
}

// selectStates gathers rows sel of h: [b, t, hidden] flattened to [b·t, hidden].
func selectStates(h torch.Raw, sel []int64, dev gotch.Device) torch.Raw {
	size := h.Size()
	flat := h.Reshape(size[0]*size[1], -1)
	idx := torch.RawFromHost(sel, []int64{int64(len(sel))}, dev)
	defer torch.Free(flat, idx)
	return flat.IndexSelect(0, idx)
}
