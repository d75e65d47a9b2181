package qwen2

import (
	"fmt"
	"slices"

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
	// Temperature, when > 0, divides this branch's logits instead of the call's
	// ScoreConfig.Temperature: the log-prob stage scores a turn's response at the
	// sampler's temperature and the gold answer after the same context at 1, over one
	// computation of that context.
	Temperature float64
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
// batched to cfg.TokenBudget (rows × longest trunk, in treeOrder; a trunk longer than
// the budget gets a batch of its own), and so are the branch rows over each batch's trunks;
// logits go through the chunked selective log-softmax of LogProbs, so [tokens, vocab]
// never exists. A branch that repeats an earlier one, the same tokens after the same
// trunk prefix, is scored once.
func (m *Model) BranchLogProbs(trees []Tree, cfg ScoreConfig) (out [][][]float32, err error) {
	cfg = cfg.withDefaults()
	for i, t := range trees {
		if err := m.checkTree(t); err != nil {
			return nil, fmt.Errorf("branch scores: tree %d: %w", i, err)
		}
	}
	torch.DoNoGrad(func() { out, err = m.branchLogProbs(trees, cfg) })
	return out, err
}

// branchLogProbs is BranchLogProbs on the torch thread. A branch that repeats an
// earlier one is scored once (distinctTrees) and its log-probs copied.
func (m *Model) branchLogProbs(trees []Tree, cfg ScoreConfig) ([][][]float32, error) {
	uniq, orig, same := distinctTrees(trees)
	lps := make([][][]float32, len(uniq))
	trunk := func(i int) int { return len(uniq[i].Trunk) }
	for _, batch := range SplitBudget(treeOrder(uniq), trunk, cfg.TokenBudget) {
		sub := make([]Tree, len(batch))
		for j, i := range batch {
			sub[j] = uniq[i]
		}
		vals, err := m.branchBatch(sub, cfg)
		if err != nil {
			in := make([]int, len(batch))
			for j, i := range batch {
				in[j] = orig[i]
			}
			return nil, fmt.Errorf("branch scores: batch of trees %v: %w", in, err)
		}
		off := 0
		for _, i := range batch {
			t := uniq[i]
			lps[i] = make([][]float32, len(t.Branches))
			for b, br := range t.Branches {
				n := len(br.IDs) - br.From
				lps[i][b] = vals[off : off+n : off+n]
				off += n
			}
		}
	}
	out := make([][][]float32, len(trees))
	for i, refs := range same {
		out[i] = make([][]float32, len(refs))
		for b, r := range refs {
			out[i][b] = slices.Clone(lps[r.tree][r.branch])
		}
	}
	return out, nil
}

// treeOrder orders trees for batching: trees whose trunks share leading tokens
// (prefixRuns) stay adjacent, so a batch holding them runs the shared tokens once
// (see trunks); runs go longest trunk first, and so do the trees within a run.
func treeOrder(trees []Tree) []int {
	seqs := make([][]int64, len(trees))
	for i, t := range trees {
		seqs[i] = t.Trunk
	}
	runs, _ := prefixRuns(seqs)
	longer := func(a, b int) int { return len(seqs[b]) - len(seqs[a]) }
	for _, run := range runs {
		slices.SortStableFunc(run, longer)
	}
	slices.SortStableFunc(runs, func(a, b []int) int { return longer(a[0], b[0]) })
	return slices.Concat(runs...)
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

// branchBatch scores a batch of trees. The trunks run first, treeChunk slots at a
// time, into a KV cache (see trunks: leading tokens that several trunks share run
// once); then the branches run as rows over a copy of their tree's cached trunk, each
// row seeing the trunk slots before its Prefix and its own tokens. Every trunk token
// is computed once however many branches continue it, no branch attends to another,
// and the scored log-probs come back flattened tree by tree, branch by branch.
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
	for i, b := range brs {
		brs[i].past = cache.slot(b.tree, b.Prefix-1) + 1
	}
	parts, order := []torch.Raw{trunkStates.h}, trunkStates.out
	defer func() { torch.Free(parts...) }()
	for _, sub := range branchBatches(brs, cfg.TokenBudget) {
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
	temps := temperatures(brs, cfg.Temperature)
	if len(temps) == 1 {
		cfg.Temperature = temps[0].t
		lp, _ := m.chunkLogProbs(sel, tgt, cfg)
		defer lp.Free()
		return torch.ToHost[float32](lp), nil
	}
	vals = make([]float32, n)
	for _, g := range temps {
		idx := torch.RawFromHost(g.scored, []int64{int64(len(g.scored))}, m.device)
		gs, gt := sel.IndexSelect(0, idx), tgt.IndexSelect(0, idx)
		cfg.Temperature = g.t
		lp, _ := m.chunkLogProbs(gs, gt, cfg)
		for k, v := range torch.ToHost[float32](lp) {
			vals[g.scored[k]] = v
		}
		torch.Free(idx, gs, gt, lp)
	}
	return vals, nil
}

// tempGroup is the scored tokens of a batch whose logits one temperature divides.
type tempGroup struct {
	t      float64
	scored []int64
}

// temperatures groups a batch's scored tokens by the temperature of their branch
// (def where a branch sets none), in order of first appearance.
func temperatures(brs []treeBranch, def float64) []tempGroup {
	var gs []tempGroup
	for _, b := range brs {
		t := def
		if b.Temperature > 0 {
			t = b.Temperature
		}
		k := slices.IndexFunc(gs, func(g tempGroup) bool { return g.t == t })
		if k < 0 {
			k, gs = len(gs), append(gs, tempGroup{t: t})
		}
		for j := range len(b.IDs) - b.From {
			gs[k].scored = append(gs[k].scored, int64(b.out+j))
		}
	}
	if len(gs) == 0 {
		gs = []tempGroup{{t: def}}
	}
	return gs
}

// treeBranch is a branch of tree tree of a batch whose first scored token is scored
// token out of the batch; its prefix lies in the trunk cache's first past slots.
type treeBranch struct {
	Branch
	tree, out, past int
}

// states are hidden states [len(out), hidden]: row k predicts scored token out[k].
type states struct {
	h   torch.Raw
	out []int
}

// trunkCache is the KV cache of a batch's trunks, row row[r] for tree r: the first
// root[r] trunk tokens sit in slots [0, root[r]) and the others from slot rest on.
// Rows go longest rest first, so extend computes only the rows still running.
type trunkCache struct {
	*Cache
	root, row []int
	rest      int
}

// slot is the cache slot of trunk token k of tree r.
func (c trunkCache) slot(r, k int) int {
	if k < c.root[r] {
		return k
	}
	return c.rest + k - c.root[r]
}

// trunks runs the trees' trunks into a new KV cache and returns it with the hidden
// states of the trunk slots that predict a branch's first token (for branches scored
// from token 0). Trunks that share leading tokens, such as the stitched trajectories
// of one prompt's samples, are grouped by prefixRuns: each group's shared root runs
// once into a root cache, and each trunk then continues a copy of its root's row with
// its own tokens. A trunk in no group runs whole.
func (m *Model) trunks(trees []Tree, brs []treeBranch) (trunkCache, states) {
	seqs := make([][]int64, len(trees))
	for i, t := range trees {
		seqs[i] = t.Trunk
	}
	runs, shared := prefixRuns(seqs)
	var rooted []int // the runs that share a root, longest root first
	for i, run := range runs {
		if len(run) >= 2 && shared[i] > 0 {
			rooted = append(rooted, i)
		}
	}
	slices.SortStableFunc(rooted, func(a, b int) int { return shared[b] - shared[a] })
	tc := trunkCache{root: make([]int, len(trees)), row: make([]int, len(trees))}
	src := make([]int, len(trees)) // root cache row each trunk continues
	roots := make([]extendRow, len(rooted))
	for k, i := range rooted {
		for _, t := range runs[i] {
			tc.root[t], src[t] = shared[i], k
		}
		roots[k] = extendRow{ids: trees[runs[i][0]].Trunk[:shared[i]]}
	}
	order := make([]int, len(trees)) // cache row → tree, longest rest first
	for r := range order {
		order[r] = r
	}
	rest := func(t int) int { return len(trees[t].Trunk) - tc.root[t] }
	slices.SortStableFunc(order, func(a, b int) int { return rest(b) - rest(a) })
	rows := make([]extendRow, len(trees))
	srcRows := make([]int64, len(trees))
	for r, t := range order {
		tc.row[t], srcRows[r] = r, int64(src[t])
		rows[r] = extendRow{ids: trees[t].Trunk[tc.root[t]:], past: tc.root[t]}
	}
	var rootPicks, restPicks []statePick
	for _, b := range brs {
		if b.From != 0 {
			continue
		}
		if q := b.Prefix - 1; q < tc.root[b.tree] {
			rootPicks = append(rootPicks, statePick{row: src[b.tree], q: q, out: b.out})
		} else {
			restPicks = append(restPicks, statePick{row: tc.row[b.tree], q: q - tc.root[b.tree], out: b.out})
		}
	}
	width := 0
	if len(order) > 0 {
		width = rest(order[0])
	}
	if len(roots) == 0 {
		tc.Cache = m.NewCache(len(trees), width)
		return tc, m.extend(tc.Cache, rows, restPicks)
	}
	rc := m.NewCache(len(roots), len(roots[0].ids))
	r := m.extend(rc, roots, rootPicks)
	tc.rest, tc.Cache = rc.Len(), rc.copyRows(srcRows, rc.Len(), rc.Len()+width)
	rc.Drop()
	s := m.extend(tc.Cache, rows, restPicks)
	return tc, states{h: catFree([]torch.Raw{r.h, s.h}), out: append(r.out, s.out...)}
}

// extendRow is a sequence that continues its row of a cache: token q sits at
// position past+q and sees the row's slots [0, past) and the sequence's own tokens.
type extendRow struct {
	ids  []int64
	past int
}

// statePick asks for the hidden state of token q of row row, which predicts scored token
// out.
type statePick struct{ row, q, out int }

// extend runs rows, one per cache row, into cache after its filled slots, treeChunk
// slots at a time so the attention intermediates stay [rows, heads, chunk, width],
// and returns the picked hidden states; a chunk with none only fills the cache (see
// fill). Callers order rows longest first, so a chunk computes only the rows still
// running (see running); within it, a padding slot of a row that ends there attends
// to slot 0 only, so no softmax row is all -inf.
func (m *Model) extend(cache *Cache, rows []extendRow, picks []statePick) states {
	base, w := cache.Len(), 0
	for _, r := range rows {
		w = max(w, len(r.ids))
	}
	var parts []torch.Raw
	var out []int
	for s := 0; s < w; s += treeChunk {
		k := min(treeChunk, w-s)
		n := running(rows, s)
		span := base + s + k
		ids, pos := make([]int64, n*k), make([]int64, n*k)
		mask := make([]bool, n*k*span)
		for r, row := range rows[:n] {
			for q := s; q < s+k; q++ {
				i := r*k + q - s
				keys := mask[i*span : (i+1)*span]
				if q >= len(row.ids) {
					pos[i], keys[0] = int64(max(row.past+len(row.ids)-1, 0)), true
					continue
				}
				ids[i], pos[i] = row.ids[q], int64(row.past+q)
				for key := range row.past {
					keys[key] = true
				}
				for key := base; key <= base+q; key++ {
					keys[key] = true
				}
			}
		}
		var sel []int64 // flat indices into this chunk's [n·k] hidden states
		for _, p := range picks {
			if p.q >= s && p.q < s+k {
				sel = append(sel, int64(p.row*k+p.q-s))
				out = append(out, p.out)
			}
		}
		shape := []int64{int64(n), int64(k)}
		it := torch.RawFromHost(ids, shape, m.device)
		pt := torch.RawFromHost(pos, shape, m.device)
		mt := torch.RawFromHost(mask, []int64{int64(n), 1, int64(k), int64(span)}, m.device)
		bias := maskBias(mt, m.dtype)
		view := cache.head(n)
		if len(sel) == 0 {
			m.fill(it, pt, bias, view)
		} else {
			h := m.hidden(it, pt, bias, view, nil)
			parts = append(parts, selectStates(h, sel, m.device))
			h.Free()
		}
		view.Drop()
		cache.advance(int64(k))
		torch.Free(it, pt, mt, bias)
	}
	if len(parts) == 0 {
		return states{h: torch.RawEmpty([]int64{0, int64(m.Config.HiddenSize)}, m.dtype, m.device)}
	}
	return states{h: catFree(parts), out: out}
}

// running is how many leading rows a chunk from token s on computes: up to the last
// row with a token there. The rows after it have ended; their slots of the chunk stay
// empty, and nothing reads them (a branch reads its trunk's slots before its Prefix).
func running(rows []extendRow, s int) int {
	n := len(rows)
	for n > 0 && len(rows[n-1].ids) <= s {
		n--
	}
	return n
}

// branches runs brs as rows over copies of their trees' rows of the trunk cache (the
// slots the batch's prefixes reach) and returns the hidden states of the branch slots
// that predict scored tokens: slot j-1 predicts token j, for j >= max(From, 1).
func (m *Model) branches(trunk trunkCache, brs []treeBranch) (torch.Raw, []int) {
	rows := make([]int64, len(brs))
	tokens := make([][]int64, len(brs))
	start := make([]int, len(brs))
	valid := make([][]bool, len(brs))
	past := 0
	for _, b := range brs {
		past = max(past, b.past)
	}
	for r, b := range brs {
		rows[r], tokens[r], start[r] = int64(trunk.row[b.tree]), b.IDs, b.Prefix
		valid[r] = make([]bool, past)
		for k := range b.Prefix {
			valid[r][trunk.slot(b.tree, k)] = true
		}
	}
	bt := NewBatch(tokens, start, valid, past)
	cache := trunk.copyRows(rows, past, past+bt.Width)
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

// branchBatches splits brs into batches of at most budget rows × (trunk slots +
// branch tokens), longest first (BudgetBatches); a branch that alone exceeds it gets a
// batch of its own.
func branchBatches(brs []treeBranch, budget int) [][]treeBranch {
	order := make([]int, len(brs))
	for i := range order {
		order[i] = i
	}
	var out [][]treeBranch
	for _, batch := range BudgetBatches(order, func(i int) int { return brs[i].past + len(brs[i].IDs) }, budget) {
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
