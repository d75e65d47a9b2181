package qwen2

import (
	"encoding/binary"
	"hash/maphash"
	"slices"
)

// branchRef names branch branch of tree tree.
type branchRef struct{ tree, branch int }

// distinctTrees is the work BranchLogProbs computes for trees: every branch that
// repeats an earlier one (the same trunk prefix, the same tokens and the same From,
// so the same log-probs) is dropped, and each trunk is cut after the longest prefix its
// remaining branches read; a tree left without branches is dropped. same[i][b] is the
// branch of the returned trees that scores branch b of trees[i]; orig[k] is the input
// tree returned tree k comes from.
//
// Rollouts repeat themselves: a GRPO group's samples often write the same memory, and
// their stitched histories agree up to a turn, so the memory pass's P_mem and P_full of
// those turns are the same numbers. On the demo's first MemPO iteration half of its
// branches' tokens are repeats, and an eighth of the old pass's.
func distinctTrees(trees []Tree) (out []Tree, orig []int, same [][]branchRef) {
	seed := maphash.MakeSeed()
	seen := map[uint64][]branchRef{} // hash → the kept branches with it
	same = make([][]branchRef, len(trees))
	for i, t := range trees {
		same[i] = make([]branchRef, len(t.Branches))
		kept := Tree{Trunk: t.Trunk}
		last := 0
		for b, br := range t.Branches {
			h := branchHash(seed, t.Trunk[:br.Prefix], br)
			ref, found := branchRef{}, false
			for _, r := range seen[h] {
				kt := kept
				if r.tree < len(out) {
					kt = out[r.tree]
				}
				kb := kt.Branches[r.branch]
				if kb.Prefix == br.Prefix && kb.From == br.From && slices.Equal(kb.IDs, br.IDs) &&
					slices.Equal(kt.Trunk[:kb.Prefix], t.Trunk[:br.Prefix]) {
					ref, found = r, true
					break
				}
			}
			if !found {
				ref = branchRef{tree: len(out), branch: len(kept.Branches)}
				seen[h] = append(seen[h], ref)
				kept.Branches = append(kept.Branches, br)
				last = max(last, br.Prefix)
			}
			same[i][b] = ref
		}
		if len(kept.Branches) == 0 {
			continue
		}
		kept.Trunk = t.Trunk[:last:last]
		out, orig = append(out, kept), append(orig, i)
	}
	return out, orig, same
}

// branchHash hashes a branch with the trunk prefix it continues.
func branchHash(seed maphash.Seed, prefix []int64, b Branch) uint64 {
	return hashTokens(seed, prefix, []int64{int64(b.From)}, b.IDs)
}

// pairHash hashes a pair.
func pairHash(seed maphash.Seed, p Pair) uint64 {
	return hashTokens(seed, p.Context, p.Response)
}

// hashTokens hashes token sequences, each after its length.
func hashTokens(seed maphash.Seed, seqs ...[]int64) uint64 {
	var buf []byte
	for _, s := range seqs {
		buf = binary.LittleEndian.AppendUint64(buf, uint64(len(s)))
		for _, v := range s {
			buf = binary.LittleEndian.AppendUint64(buf, uint64(v))
		}
	}
	return maphash.Bytes(seed, buf)
}

// repeats maps each pair to the first pair with the same context and response
// (itself when none precedes it). A tree pass computes a repeated pair once, and
// its scores' gradients sum over the copies (treeSplit, treePack.score): a GRPO
// group's samples often take the same turn word for word.
func repeats(pairs []Pair) []int {
	seed := maphash.MakeSeed()
	seen := map[uint64][]int{}
	rep := make([]int, len(pairs))
	for i, p := range pairs {
		rep[i] = i
		h := pairHash(seed, p)
		for _, j := range seen[h] {
			if slices.Equal(pairs[j].Context, p.Context) && slices.Equal(pairs[j].Response, p.Response) {
				rep[i] = j
				break
			}
		}
		if rep[i] == i {
			seen[h] = append(seen[h], i)
		}
	}
	return rep
}
