package qwen2

import (
	"encoding/binary"
	"hash/maphash"
	"math"
	"slices"
)

// branchRef names branch branch of tree tree.
type branchRef struct{ tree, branch int }

// distinctTrees is the work BranchLogProbs computes for trees: every branch that
// repeats an earlier one (the same trunk prefix, the same tokens, From and
// Temperature, so the same log-probs) is dropped, and each trunk is cut after the longest prefix its
// remaining branches read; a tree left without branches is dropped. same[i][b] is the
// branch of the returned trees that scores branch b of trees[i]; orig[k] is the input
// tree returned tree k comes from.
//
// Rollouts repeat themselves: a GRPO group's samples often write the same memory, and
// their stitched histories agree up to a turn, so the memory pass's P_mem and P_full of
// those turns are the same numbers. On the demo's first MemPO iteration half of its
// branches' tokens are repeats, and an eighth of the old pass's.
func distinctTrees(trees []Tree) (out []Tree, orig []int, same [][]branchRef) {
	var refs []branchRef // every branch, tree by tree
	for i, t := range trees {
		for b := range t.Branches {
			refs = append(refs, branchRef{i, b})
		}
	}
	at := func(k int) ([]int64, Branch) {
		t := trees[refs[k].tree]
		b := t.Branches[refs[k].branch]
		return t.Trunk[:b.Prefix], b
	}
	first := firstCopies(len(refs), func(seed maphash.Seed, k int) uint64 {
		prefix, b := at(k)
		return hashTokens(seed, prefix, []int64{int64(b.From), int64(math.Float64bits(b.Temperature))}, b.IDs)
	}, func(j, k int) bool {
		pj, bj := at(j)
		pk, bk := at(k)
		return bj.From == bk.From && bj.Temperature == bk.Temperature && slices.Equal(bj.IDs, bk.IDs) && slices.Equal(pj, pk)
	})
	kept := make([]branchRef, len(refs)) // where a first copy lands in out
	same = make([][]branchRef, len(trees))
	k := 0
	for i, t := range trees {
		same[i] = make([]branchRef, len(t.Branches))
		tree, last := Tree{}, 0
		for b, br := range t.Branches {
			if first[k] == k {
				kept[k] = branchRef{tree: len(out), branch: len(tree.Branches)}
				tree.Branches = append(tree.Branches, br)
				last = max(last, br.Prefix)
			}
			same[i][b] = kept[first[k]]
			k++
		}
		if len(tree.Branches) > 0 {
			tree.Trunk = t.Trunk[:last:last]
			out, orig = append(out, tree), append(orig, i)
		}
	}
	return out, orig, same
}

// BranchTokens is the trunk and branch tokens BranchLogProbs computes for trees:
// a repeated branch once, each trunk up to the last prefix its distinct branches read
// (see distinctTrees), a root that trunks of one batch share counted for each.
func BranchTokens(trees []Tree) int {
	kept, _, _ := distinctTrees(trees)
	n := 0
	for _, t := range kept {
		n += len(t.Trunk)
		for _, b := range t.Branches {
			n += len(b.IDs)
		}
	}
	return n
}

// firstCopies maps each of n items to the first item equal to it (itself when none
// precedes it), bucketing the items by hash and comparing within a bucket.
func firstCopies(n int, hash func(seed maphash.Seed, i int) uint64, equal func(i, j int) bool) []int {
	seed := maphash.MakeSeed()
	seen := map[uint64][]int{} // hash → the first copies with it
	first := make([]int, n)
	for i := range first {
		first[i] = i
		h := hash(seed, i)
		for _, j := range seen[h] {
			if equal(j, i) {
				first[i] = j
				break
			}
		}
		if first[i] == i {
			seen[h] = append(seen[h], i)
		}
	}
	return first
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
	return firstCopies(len(pairs), func(seed maphash.Seed, i int) uint64 {
		return hashTokens(seed, pairs[i].Context, pairs[i].Response)
	}, func(i, j int) bool {
		return slices.Equal(pairs[i].Context, pairs[j].Context) && slices.Equal(pairs[i].Response, pairs[j].Response)
	})
}
