package statestore

import (
	"math/bits"
	"slices"
)

// activeIndex is active accounting's block table (active.go): which slots
// carry which blocks of the requests they run. It answers MatchActive (the
// leading run of a chain active on each slot) and counts each slot's
// distinct active blocks as requests come and go.
//
// It is a trie of the requests' chains, path-compressed: a node holds a run
// of consecutive chain hashes (its label), and the slots carrying it, with
// how many of their requests do. The structure rests on one property of
// router hash chains (kvhash): chain(i) names the whole prefix up to block
// i, so two chains that share a hash share every block before it. Hence:
//
//   - a request's blocks are one root-to-node path: it holds every node on
//     it, whole (a node is split where a chain ends or leaves it);
//   - a block is active on a slot iff the slot holds the block's node, so
//     a slot's distinct active blocks are the total label length of the
//     nodes it holds, and the active run of a chain on a slot ends at the
//     first node along the chain's path the slot does not hold;
//   - a node nobody holds has no holders below it either, and is dropped.
//
// So adding or removing a chain of n blocks costs one child lookup per node
// on its path (a handful) and a sequential compare of n hashes; the hash
// table this replaces paid a cache miss per block, on both the decision and
// its completion, which made it the largest cost of active accounting.
//
// Blocks are told apart by their position in a chain as well as by hash: a
// hash repeated within or across chains at different depths (which under
// kvhash is a 64-bit collision, and otherwise only a caller's made-up
// block_hashes) counts once per depth. Memory only, derived from the
// entries: never reaches Pebble or the digest. No map iteration order
// reaches a result: the one map walk is over a map of exactly one child.
type activeIndex struct {
	root atNode
	// blocks is the total label length of all nodes: the distinct active
	// blocks over all slots, counting a block once however many slots
	// carry it.
	blocks int
	nodes  int
}

// atNode is one run of blocks of the trie.
type atNode struct {
	// label holds the chain hashes of this node, at depths [d, d+len) where
	// d is the parent's depth plus its label length. Owned by the node:
	// never shared with a request's chain, and never appended to in place.
	label []uint64
	// kids are the children by the first hash of their labels.
	kids map[uint64]*atNode
	// holders are the slots holding this node, in slot order, each with
	// the number of its requests whose path runs through the node; words
	// is the same set as a bitset, for MatchActive.
	holders []atHolder
	words   []uint64
}

type atHolder struct {
	slot int32
	n    uint32
}

// addChain counts one more request carrying chain on slot and returns how
// many (block, slot) pairs are new: the blocks the slot did not carry yet.
func (x *activeIndex) addChain(chain []uint64, slot int32) int64 {
	var added int64
	parent := &x.root
	for pos := 0; pos < len(chain); {
		k := parent.kids[chain[pos]]
		if k == nil {
			k = &atNode{label: slices.Clone(chain[pos:])}
			x.adopt(parent, k)
			x.blocks += len(k.label)
			return added + k.hold(slot)
		}
		m := commonPrefix(k.label, chain[pos:])
		if m < len(k.label) {
			x.split(k, m)
		}
		added += k.hold(slot)
		pos += m
		parent = k
	}
	return added
}

// removeChain undoes addChain and returns how many pairs are gone.
// Removing a chain that was not added leaves the index as it is (it cannot
// happen: contributions are removed exactly as they were added).
func (x *activeIndex) removeChain(chain []uint64, slot int32) int64 {
	var stack [16]*atNode
	path := stack[:1]
	path[0] = &x.root
	for pos := 0; pos < len(chain); {
		k := path[len(path)-1].kids[chain[pos]]
		if k == nil || len(chain)-pos < len(k.label) || commonPrefix(k.label, chain[pos:]) < len(k.label) || !k.has(slot) {
			return 0
		}
		path = append(path, k)
		pos += len(k.label)
	}
	var gone int64
	// Leaf first: a node left without holders has none below it.
	for i := len(path) - 1; i >= 1; i-- {
		k, parent := path[i], path[i-1]
		gone += k.release(slot)
		if len(k.holders) == 0 {
			delete(parent.kids, k.label[0])
			x.blocks -= len(k.label)
			x.nodes--
			continue
		}
		x.mergeOnlyKid(k)
	}
	return gone
}

// adopt makes k a child of parent.
func (x *activeIndex) adopt(parent, k *atNode) {
	if parent.kids == nil {
		parent.kids = make(map[uint64]*atNode, 1)
	}
	parent.kids[k.label[0]] = k
	x.nodes++
}

// split cuts k after m blocks: k keeps the first m and its holders (every
// request through the tail runs through the head), and a new only child
// takes the rest, k's holders and k's children.
func (x *activeIndex) split(k *atNode, m int) {
	tail := &atNode{label: k.label[m:], kids: k.kids,
		holders: slices.Clone(k.holders), words: slices.Clone(k.words)}
	k.label = k.label[:m:m]
	k.kids = nil
	x.adopt(k, tail)
}

// mergeOnlyKid joins k with its only child when both have the same
// holders (no request ends at k): undoing the split a finished request
// needed keeps paths short.
func (x *activeIndex) mergeOnlyKid(k *atNode) {
	if len(k.kids) != 1 {
		return
	}
	var kid *atNode
	for _, c := range k.kids { // exactly one
		kid = c
	}
	if !slices.Equal(kid.holders, k.holders) {
		return
	}
	k.label = append(slices.Clip(k.label), kid.label...)
	k.kids = kid.kids
	x.nodes--
}

// hold counts one more request of slot through k and returns the blocks
// new to the slot (k's length if the slot did not hold it).
func (k *atNode) hold(slot int32) int64 {
	i, found := k.find(slot)
	if found {
		k.holders[i].n++
		return 0
	}
	k.holders = slices.Insert(k.holders, i, atHolder{slot: slot, n: 1})
	w := int(slot) / 64
	if w >= len(k.words) {
		k.words = append(k.words, make([]uint64, w+1-len(k.words))...)
	}
	k.words[w] |= 1 << (uint(slot) % 64)
	return int64(len(k.label))
}

// release undoes hold and returns the blocks the slot no longer carries.
func (k *atNode) release(slot int32) int64 {
	i, found := k.find(slot)
	if !found {
		return 0
	}
	if k.holders[i].n > 1 {
		k.holders[i].n--
		return 0
	}
	k.holders = slices.Delete(k.holders, i, i+1)
	k.words[int(slot)/64] &^= 1 << (uint(slot) % 64)
	return int64(len(k.label))
}

func (k *atNode) find(slot int32) (int, bool) {
	return slices.BinarySearchFunc(k.holders, slot, func(h atHolder, s int32) int { return int(h.slot - s) })
}

func (k *atNode) has(slot int32) bool {
	w := int(slot) / 64
	return w < len(k.words) && k.words[w]&(1<<(uint(slot)%64)) != 0
}

// word is word w of k's holder bitset.
func (k *atNode) word(w int) uint64 {
	if w < len(k.words) {
		return k.words[w]
	}
	return 0
}

// commonPrefix is the length of the common prefix of a and b.
func commonPrefix(a, b []uint64) int {
	n := min(len(a), len(b))
	for i := 0; i < n; i++ {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

// matchActive is MatchActive over slots: the leading run of chain active on
// each live slot (a bitset of slots, consumed): runs is called once per
// live slot with its run length.
func (x *activeIndex) matchActive(chain []uint64, live []uint64, runs func(slot int32, n int)) {
	parent, pos := &x.root, 0
	for pos < len(chain) {
		k := parent.kids[chain[pos]]
		if k == nil {
			break
		}
		// Slots not holding k end their run where k begins.
		any := false
		for w := range live {
			held := k.word(w)
			for ended := live[w] &^ held; ended != 0; ended &= ended - 1 {
				runs(int32(w*64+bits.TrailingZeros64(ended)), pos)
			}
			live[w] &= held
			any = any || live[w] != 0
		}
		if !any {
			return
		}
		m := commonPrefix(k.label, chain[pos:])
		pos += m
		if m < len(k.label) {
			break
		}
		parent = k
	}
	for w := range live {
		for rest := live[w]; rest != 0; rest &= rest - 1 {
			runs(int32(w*64+bits.TrailingZeros64(rest)), pos)
		}
	}
}
