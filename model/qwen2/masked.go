package qwen2

import (
	"fmt"
	"runtime"
	"slices"

	"github.com/mempo/mempo/model/torch"
)

// Branch is a continuation of the first Prefix tokens of a Tree's trunk.
type Branch struct {
	Prefix int     // trunk tokens the branch continues, 0 < Prefix <= len(Trunk)
	IDs    []int64 // the branch's own tokens
	// From is the first branch token to score: BranchLogProbs returns
	// log π(IDs[j] | Trunk[:Prefix], IDs[:j]) for j in [From, len(IDs)).
	From int
}

// Tree is a trunk sequence with branches that each continue one prefix of it. The
// packed row [trunk, branch 0, branch 1, …] runs under one attention mask (in chunks,
// see treeChunk) that scores every branch as if it followed its prefix alone: a branch token attends to Trunk[:Prefix] and to the
// earlier tokens of its own branch and sits at position Prefix+j; trunk tokens never
// attend to branches. So many continuations of one context (the memory pass's answer
// copies after every turn of a trajectory, or every memory of a prompt) cost one
// forward over the shared tokens instead of one per continuation.
type Tree struct {
	Trunk    []int64
	Branches []Branch
}

// width is the packed row length.
func (t Tree) width() int {
	n := len(t.Trunk)
	for _, b := range t.Branches {
		n += len(b.IDs)
	}
	return n
}

// scored is the number of log-probs the tree yields.
func (t Tree) scored() int {
	n := 0
	for _, b := range t.Branches {
		n += len(b.IDs) - b.From
	}
	return n
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

// packed is the host side of a batch of trees: ids, positions and the [row, query,
// key] attention mask of right-padded rows, and for every scored token the flat
// index of the position that predicts it and its id.
type packed struct {
	rows, width int
	ids, pos    []int64
	mask        []bool
	at, target  []int64
}

// pack lays trees out one per row. Padding queries attend to key 0 only, so no mask
// row is empty and softmax never sees all -inf.
func pack(trees []Tree) packed {
	p := packed{rows: len(trees)}
	for _, t := range trees {
		p.width = max(p.width, t.width())
	}
	w := p.width
	p.ids = make([]int64, p.rows*w)
	p.pos = make([]int64, p.rows*w)
	p.mask = make([]bool, p.rows*w*w)
	for r, t := range trees {
		base := r * w
		for i, id := range t.Trunk {
			p.ids[base+i], p.pos[base+i] = id, int64(i)
			row := p.mask[(base+i)*w:]
			for k := 0; k <= i; k++ {
				row[k] = true
			}
		}
		off := len(t.Trunk)
		for _, b := range t.Branches {
			for j, id := range b.IDs {
				q := off + j
				p.ids[base+q], p.pos[base+q] = id, int64(b.Prefix+j)
				row := p.mask[(base+q)*w:]
				for k := 0; k < b.Prefix; k++ {
					row[k] = true
				}
				for k := off; k <= q; k++ {
					row[k] = true
				}
				if j < b.From {
					continue
				}
				from := base + off + j - 1
				if j == 0 {
					from = base + b.Prefix - 1
				}
				p.at = append(p.at, int64(from))
				p.target = append(p.target, id)
			}
			off += len(b.IDs)
		}
		for q := off; q < w; q++ {
			p.mask[(base+q)*w] = true
		}
	}
	return p
}

// BranchLogProbs scores every branch of every tree without gradients:
// out[tree][branch][j-From] = log π(IDs[j] | Trunk[:Prefix], IDs[:j]). Trees are packed
// one per row and batched to cfg.TokenBudget (rows × widest row, widest first; a tree
// wider than the budget gets a batch of its own); logits go through the chunked
// selective log-softmax of LogProbs, so [tokens, vocab] never exists.
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
	for _, batch := range treeBatches(trees, cfg.TokenBudget) {
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

// treeBatches groups tree indices, widest first, so rows × widest <= budget.
func treeBatches(trees []Tree, budget int) [][]int {
	order := make([]int, len(trees))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return trees[b].width() - trees[a].width() })
	var out [][]int
	var cur []int
	width := 0
	for _, i := range order {
		w := max(width, trees[i].width())
		if len(cur) > 0 && (len(cur)+1)*w > budget {
			out = append(out, cur)
			cur, w = nil, trees[i].width()
		}
		cur = append(cur, i)
		width = w
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

// treeChunk is how many packed slots one forward step of branchBatch computes. Every
// key a slot attends to sits at or before it (trunk causal, a branch reads an earlier
// prefix and its own earlier tokens), so the row can be run chunk by chunk through a
// KV cache with exactly the one-forward mask: only the lower block-triangle of the
// dense [width, width] attention is computed, and the attention intermediates stay
// [rows, heads, chunk, width] instead of [rows, heads, width, width]. Measured on the
// tiny preset, 16 stitched trajectories of 870 tokens with 5 answer copies each, token
// budget 8192, fastest of 3 on 2 shared CPU cores: 1.91 s in one forward, 1.51 s in
// chunks of 512, 1.19 s of 256, 1.24 s of 128. A variable so tests can check that any
// chunking gives the same log-probs.
var treeChunk = 256

// branchBatch runs trees packed as one right-padded batch, treeChunk slots at a time
// through a KV cache, and returns the scored log-probs flattened tree by tree, branch
// by branch.
func (m *Model) branchBatch(trees []Tree, cfg ScoreConfig) (vals []float32, err error) {
	defer torch.Catch(fmt.Sprintf("branch log-probs of %d trees", len(trees)), &err)
	p := pack(trees)
	n := int64(len(p.at))
	if n == 0 {
		return nil, nil
	}
	w := p.width
	cache := m.NewCache(p.rows, w)
	defer cache.Drop()
	var parts []torch.Raw // selected hidden states, chunk by chunk
	defer func() { torch.Free(parts...) }()
	var order []int64 // order[k] = index into p.at of the k-th selected state
	for s := 0; s < w; s += treeChunk {
		k := min(treeChunk, w-s)
		ids := make([]int64, 0, p.rows*k)
		pos := make([]int64, 0, p.rows*k)
		mask := make([]bool, 0, p.rows*k*(s+k))
		for r := range p.rows {
			ids = append(ids, p.ids[r*w+s:r*w+s+k]...)
			pos = append(pos, p.pos[r*w+s:r*w+s+k]...)
			for q := s; q < s+k; q++ {
				row := (r*w + q) * w
				mask = append(mask, p.mask[row:row+s+k]...)
			}
		}
		var sel []int64 // flat indices into this chunk's [rows·k] hidden states
		for i, at := range p.at {
			r, q := int(at)/w, int(at)%w
			if q >= s && q < s+k {
				sel = append(sel, int64(r*k+q-s))
				order = append(order, int64(i))
			}
		}
		shape := []int64{int64(p.rows), int64(k)}
		it := torch.RawFromHost(ids, shape, m.device)
		pt := torch.RawFromHost(pos, shape, m.device)
		mt := torch.RawFromHost(mask, []int64{int64(p.rows), 1, int64(k), int64(s + k)}, m.device)
		bias := maskBias(mt, m.dtype)
		h := m.hidden(it, pt, bias, cache, nil)
		torch.Free(it, pt, mt, bias)
		if len(sel) == 0 {
			h.Free()
			continue
		}
		flat := h.Reshape(int64(p.rows*k), -1)
		idx := torch.RawFromHost(sel, []int64{int64(len(sel))}, m.device)
		parts = append(parts, flat.IndexSelect(0, idx))
		torch.Free(h, flat, idx)
	}
	all := torch.RawCat(parts, 0) // [n, hidden] in chunk order
	// inverse[i] = row of all holding p.at[i]'s state
	inverse := make([]int64, n)
	for k, i := range order {
		inverse[i] = int64(k)
	}
	inv := torch.RawFromHost(inverse, []int64{n}, m.device)
	sel := all.IndexSelect(0, inv)
	torch.Free(all, inv)
	defer sel.Free()
	tgt := torch.RawFromHost(p.target, []int64{n, 1}, m.device)
	defer tgt.Free()
	cfg.Entropy = false
	lp, _ := m.chunkLogProbs(sel, tgt, cfg)
	defer lp.Free()
	return torch.ToHost[float32](lp), nil
}
