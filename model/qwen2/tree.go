package qwen2

import (
	"fmt"
	"math"
	"slices"

	"github.com/sugarme/gotch/ts"

	"github.com/mempo/mempo/model/torch"
)

// TreeLogProbTensor is LogProbTensor for pairs whose contexts share leading tokens,
// with gradients: the pairs are grouped over their shared context prefixes
// (prefixRuns), each group's shared prefix, its trunk, runs once through a trunk
// forward, and every pair's branch, the rest of its context
// and its response, runs in a branch forward whose queries read their trunk's keys and
// values (sharedKV). Autograd sees one graph: a trunk token's gradient sums over every
// branch that attends to it. A GRPO group's samples share the prompt, and a turn's
// context often repeats an earlier one's, so a training pass computes each shared
// token once instead of once per pair. With cfg.ShareScored the pairs group over
// their whole sequences, and a trunk position that predicts a scored token is scored
// once, its log-prob gathered for every pair that reads it. The values and gradients
// agree with LogProbTensor's to float rounding; only the GEMM shapes differ. A pair
// that repeats an earlier one word for word is computed once, its scores read by both.
// Without a prefix shared by two pairs it is LogProbTensor.
func (m *Model) TreeLogProbTensor(pairs []Pair, cfg ScoreConfig) (lp, ent *ts.Tensor, err error) {
	cfg = cfg.withDefaults()
	for i, p := range pairs {
		if err := m.checkPair(p); err != nil {
			return nil, nil, fmt.Errorf("pair %d: %w", i, err)
		}
	}
	tp, ok := packTrees(pairs, cfg.ShareScored)
	if !ok {
		return m.LogProbTensor(pairs, cfg)
	}
	defer torch.Catch(fmt.Sprintf("tree log-probs of %d pairs", len(pairs)), &err)
	lp, ent = m.scoreHidden(m.treeHidden(tp), tp.at, tp.target, cfg)
	if tp.expand != nil {
		// A shared score's gradient sums over the pairs that read it.
		idx := torch.FromHost(tp.expand, []int64{int64(len(tp.expand))}, m.device)
		defer idx.MustDrop()
		lp = torch.Must(lp.IndexSelect(0, idx, true))
		if ent != nil {
			ent = torch.Must(ent.IndexSelect(0, idx, true))
		}
	}
	return lp, ent, nil
}

// treePack is the host side of a tree pass: the trunks packed into rows, the branches
// packed into rows after a past of their trunks' slots, and where each response token
// is predicted.
type treePack struct {
	trunk, branch rowPack
	// past is the past width of every branch row; pastSlot[r·past+j] is the trunk
	// pass's flat slot that past slot j of branch row r holds (0 for padding).
	past     int
	pastSlot []int64
	bias     []float32 // [branch rows, 1, branch width, past + branch width]
	// at is the flat slot predicting each distinct scored token, target the token: in
	// the branch pass's hidden states, or, when trunked, in the trunk pass's followed
	// by the branch pass's. expand maps the response tokens, pair by pair, to those
	// entries (nil when they are the same list): pairs sharing a trunk share the
	// scores of the tokens in it.
	at, target []int64
	trunked    bool
	expand     []int64
}

// TreeSlots is the token slots of the tree pass over pairs, the trunk pass's and the
// branch pass's rows × width together, padding included: what a training pass
// computes and what its memory grows with. The past each branch row reads is not
// counted.
func TreeSlots(pairs []Pair) int {
	trunks, branches, groups := treeLengths(pairs, false)
	_, tr, tw := place(trunks, nil)
	_, br, bw := place(branches, groups)
	return tr*tw + br*bw
}

// TreeShape is the lengths of the sequences the tree pass over pairs runs, its
// trunks' and then its branches', and the most keys a query attends to: a branch
// row's past (the longest trunk, see packTrees) and its own width.
func TreeShape(pairs []Pair, shareScored bool) (lengths []int, keys int) {
	trunks, branches, groups := treeLengths(pairs, shareScored)
	_, _, w := place(branches, groups)
	past := 0
	for _, n := range trunks {
		past = max(past, n)
	}
	return append(trunks, branches...), past + w
}

// treeLengths is the lengths of the tree pass's trunks and branches, and each
// branch's trunk.
func treeLengths(pairs []Pair, whole bool) (trunk, branch, group []int) {
	trunks, branches := treeSplit(pairs, repeats(pairs), whole)
	for _, t := range trunks {
		trunk = append(trunk, len(t))
	}
	for _, b := range branches {
		p := pairs[b.pair]
		branch, group = append(branch, len(p.Context)-b.shared+len(p.Response)), append(group, b.trunk)
	}
	return trunk, branch, group
}

// TreeBatches splits idx into the batches of tree passes: idx in context order (ties
// in idx order) cut into consecutive batches of at most budget TreeSlots each, so
// pairs sharing a prefix share a pass; a pair over the budget gets a batch of its
// own, and budget 0 keeps idx whole.
func TreeBatches(idx []int, pair func(int) Pair, budget int) [][]int {
	order := slices.Clone(idx)
	if budget <= 0 {
		return [][]int{order}
	}
	slices.SortStableFunc(order, func(a, b int) int { return slices.Compare(pair(a).Context, pair(b).Context) })
	slots := func(part []int) int {
		ps := make([]Pair, len(part))
		for i, k := range part {
			ps[i] = pair(k)
		}
		return TreeSlots(ps)
	}
	var out [][]int
	for start := 0; start < len(order); {
		// The longest batch from start within the budget (at least one pair):
		// doubling its length until one does not fit, then bisecting.
		good, bad := start+1, -1
		for n := 2; good < len(order); n *= 2 {
			e := min(start+n, len(order))
			if slots(order[start:e]) > budget {
				bad = e
				break
			}
			good = e
		}
		for bad > good+1 {
			mid := (good + bad) / 2
			if slots(order[start:mid]) <= budget {
				good = mid
			} else {
				bad = mid
			}
		}
		out = append(out, order[start:good:good])
		start = good
	}
	return out
}

// sharedBranch is one pair's branch: its tokens after its trunk, at least one.
type sharedBranch struct {
	pair   int // index into the pairs
	trunk  int // index into the trunks, -1 for none
	shared int // tokens in the trunk
}

// ids is the branch's tokens: context + response of its pair p after the trunk.
func (b sharedBranch) ids(p Pair) []int64 { return p.tokens()[b.shared:] }

// tokens is the pair's context and response as one sequence.
func (p Pair) tokens() []int64 { return slices.Concat(p.Context, p.Response) }

// treeSplit groups the pairs with a response over the prefixes their contexts share,
// or over their whole sequences, context and response (prefixRuns), into trunks
// and branches. A group of one pair keeps its whole sequence as its branch, and a
// trunk stops one token short of the shortest sequence it groups, so every branch
// holds a token: grouped by context, every scored token is predicted in a branch; by
// whole sequences, a trunk covers the scored tokens its pairs share too (SFT's
// context loss scores the system prompt every turn shares). A pair that repeats an
// earlier one (rep, see repeats) gets no branch of its own.
func treeSplit(pairs []Pair, rep []int, whole bool) (trunks [][]int64, branches []sharedBranch) {
	var seqs [][]int64
	var scored []int
	for i, p := range pairs {
		if len(p.Response) > 0 && rep[i] == i {
			s := p.Context
			if whole {
				s = p.tokens()
			}
			seqs, scored = append(seqs, s), append(scored, i)
		}
	}
	runs, shared := prefixRuns(seqs)
	for g, run := range runs {
		n := shared[g]
		if len(run) == 1 {
			n = 0
		}
		for _, k := range run {
			n = min(n, len(seqs[k])-1)
		}
		t := -1
		if n > 0 {
			t = len(trunks)
			trunks = append(trunks, seqs[run[0]][:n])
		}
		for _, k := range run {
			branches = append(branches, sharedBranch{pair: scored[k], trunk: t, shared: n})
		}
	}
	return trunks, branches
}

// packTrees lays the tree pass out; ok is false when no two pairs share a trunk.
func packTrees(pairs []Pair, whole bool) (tp treePack, ok bool) {
	rep := repeats(pairs)
	trunks, branches := treeSplit(pairs, rep, whole)
	if len(trunks) == 0 {
		return treePack{}, false
	}
	tp.trunk = packRows(trunks)
	seqs := make([][]int64, len(branches))
	groups := make([]int, len(branches))
	for i, b := range branches {
		seqs[i], groups[i] = b.ids(pairs[b.pair]), b.trunk
	}
	tp.branch = packGroups(seqs, groups)
	// A branch row holds branches of one trunk; its past is that trunk.
	w := tp.branch.width
	rowTrunk := make([]int, tp.branch.rows)
	for r := range rowTrunk {
		rowTrunk[r] = -1
	}
	for i, b := range branches {
		rowTrunk[tp.branch.slot[i]/w] = b.trunk
	}
	for _, t := range trunks { // every trunk has branches
		tp.past = max(tp.past, len(t))
	}
	tp.pastSlot = make([]int64, tp.branch.rows*tp.past)
	for r, t := range rowTrunk {
		if t >= 0 {
			for k := range trunks[t] {
				tp.pastSlot[r*tp.past+k] = int64(tp.trunk.slot[t] + k)
			}
		}
	}
	tp.bias = tp.branchBias(branches, seqs, trunks)
	for i, b := range branches {
		for j := range seqs[i] {
			tp.branch.pos[tp.branch.slot[i]+j] += int64(b.shared)
		}
	}
	tp.score(pairs, rep, branches)
	return tp, true
}

// score sets where each response token is predicted, in pair order as LogProbTensor
// returns them: token q of a sequence is predicted at position q-1, in its trunk's
// row when that position is in the trunk, else in its branch. A repeated pair (rep)
// reads its first copy's scores.
func (tp *treePack) score(pairs []Pair, rep []int, branches []sharedBranch) {
	of := make([]int, len(pairs)) // the pair's branch, -1 for none
	for i := range of {
		of[i] = -1
	}
	for i, b := range branches {
		of[b.pair] = i
	}
	for i, r := range rep {
		of[i] = of[r]
	}
	type scored struct {
		trunk      bool
		at, target int64
	}
	var all []scored
	for _, i := range of {
		if i < 0 {
			continue
		}
		b, p := branches[i], pairs[branches[i].pair]
		for j, tok := range p.Response {
			q := len(p.Context) + j - 1
			if q < b.shared {
				all = append(all, scored{true, int64(tp.trunk.slot[b.trunk] + q), tok})
				tp.trunked = true
			} else {
				all = append(all, scored{false, int64(tp.branch.slot[i] + q - b.shared), tok})
			}
		}
	}
	trunkSlots := int64(tp.trunk.rows * tp.trunk.width)
	index := map[scored]int64{}
	for _, s := range all {
		k, seen := index[s]
		if !seen {
			k = int64(len(tp.at))
			index[s] = k
			at := s.at
			if tp.trunked && !s.trunk {
				at += trunkSlots
			}
			tp.at, tp.target = append(tp.at, at), append(tp.target, s.target)
		}
		tp.expand = append(tp.expand, k)
	}
	if len(tp.at) == len(all) {
		tp.expand = nil
	}
}

// branchBias is the branch pass's additive mask: a query of a branch reads its
// trunk's past slots and its own branch up to itself; a padding query reads its row's
// first own slot only, so no softmax row is all -inf.
func (tp *treePack) branchBias(branches []sharedBranch, seqs, trunks [][]int64) []float32 {
	w, keys := tp.branch.width, tp.past+tp.branch.width
	out := make([]float32, tp.branch.rows*w*keys)
	inf := float32(math.Inf(-1))
	for i := range out {
		out[i] = inf
	}
	for k, first := range tp.branch.first {
		if first < 0 {
			out[k*keys+tp.past] = 0
		}
	}
	for i, b := range branches {
		s := tp.branch.slot[i]
		r, c := s/w, s%w
		for j := range seqs[i] {
			row := out[(r*w+c+j)*keys : (r*w+c+j+1)*keys]
			if b.trunk >= 0 {
				for k := range trunks[b.trunk] {
					row[k] = 0
				}
			}
			for k := c; k <= c+j; k++ {
				row[tp.past+k] = 0
			}
		}
	}
	return out
}

// treeHidden runs the tree pass: layer by layer, the trunks' forward and then the
// branches', whose attention prepends each row's past, gathered from the trunks'
// keys and values of that layer. It returns the final hidden states the scores read:
// the branches' [branch rows, branch width, hidden], or, when the trunks hold scored
// positions, the trunks' and then the branches' as [slots, hidden]. Otherwise the last
// layer computes only the trunks' keys and values: nothing reads their outputs.
func (m *Model) treeHidden(tp treePack) torch.Raw {
	pa, ida := m.treeInputs(tp.trunk, 0, tp.trunk.bias())
	defer pa.free()
	pb, idb := m.treeInputs(tp.branch, tp.past, tp.bias)
	defer pb.free()
	slots := torch.RawFromHost(tp.pastSlot, []int64{int64(len(tp.pastSlot))}, m.device)
	defer slots.Free()
	ha, hb := m.embed(ida, pa.grad), m.embed(idb, pb.grad)
	torch.Free(ida, idb)
	last := len(m.Layers) - 1
	for i, l := range m.Layers {
		kv := &sharedKV{slots: slots, rows: pb.b, past: int64(tp.past)}
		if i < last || tp.trunked {
			next := l.forward(ha, pa, kv, nil)
			ha.Free()
			ha = next
		} else {
			l.keysValues(ha, pa, kv)
			ha.Free()
		}
		next := l.forward(hb, pb, kv, nil)
		hb.Free()
		hb = next
	}
	defer hb.Free()
	if !tp.trunked {
		return m.Norm.forward(hb, pb)
	}
	defer ha.Free()
	hidden := int64(m.Config.HiddenSize)
	fa, fb := ha.Reshape(-1, hidden), hb.Reshape(-1, hidden)
	both := torch.RawCat([]torch.Raw{fa, fb}, 0)
	torch.Free(fa, fb)
	defer both.Free()
	return m.Norm.forward(both, pb)
}

// treeInputs is the pass of one side of a tree pass, with past key slots before each
// row's own under mask, and its token ids.
func (m *Model) treeInputs(b rowPack, past int, mask []float32) (*pass, torch.Raw) {
	ids, pos, bias := b.inputsWith(m, mask, past+b.width)
	defer pos.Free()
	p := m.newPass(pos, bias, int64(b.rows), int64(b.width), int64(past+b.width), torch.GradEnabled())
	p.own = true
	return p, ids
}

// keysValues runs layer l on x only as far as its keys and values, and appends them
// to kv.
func (l *DecoderLayer) keysValues(x torch.Raw, p *pass, kv kvStore) {
	n := l.InputNorm.forward(x, p)
	q, k, v := l.Attn.qkv(n, p, nil)
	keys, vals := k.Transpose(1, 2), v.Transpose(1, 2)
	ck, cv := kv.append(keys, vals)
	torch.Free(n, q, k, v, keys, vals, ck, cv)
}

// sharedKV links one layer of a tree pass: the trunk forward's append gathers, for
// every branch row, its past from the trunks' keys and values; the branch forward's
// append puts that past before the row's own keys and values.
type sharedKV struct {
	slots      torch.Raw // [rows·past]: the trunk pass's flat slot of each past slot
	rows, past int64
	k, v       torch.Raw // the gathered past, [rows, kvHeads, past, headDim]
	gathered   bool
}

func (s *sharedKV) append(k, v torch.Raw) (torch.Raw, torch.Raw) {
	if !s.gathered {
		s.k, s.v, s.gathered = s.gather(k), s.gather(v), true
		return k.Alias(), v.Alias()
	}
	ck, cv := torch.RawCat([]torch.Raw{s.k, k}, 2), torch.RawCat([]torch.Raw{s.v, v}, 2)
	torch.Free(s.k, s.v)
	return ck, cv
}

// gather picks x: [trunk rows, kvHeads, width, headDim] at the past slots into
// [rows, kvHeads, past, headDim].
func (s *sharedKV) gather(x torch.Raw) torch.Raw {
	size := x.Size()
	t := x.Transpose(1, 2) // [trunk rows, width, kvHeads, headDim]
	flat := t.Reshape(size[0]*size[2], size[1], size[3])
	sel := flat.IndexSelect(0, s.slots)
	v := sel.View(s.rows, s.past, size[1], size[3])
	out := v.Transpose(1, 2)
	torch.Free(t, flat, sel, v)
	return out
}
