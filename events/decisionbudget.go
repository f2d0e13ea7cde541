package events

import (
	"google.golang.org/protobuf/encoding/protowire"

	pb "github.com/pdrouter/pdrouter/events/eventspb"
)

// A decision record must fit the decisions topic's message limit: a record
// the broker refuses is refused again on every retry. Its table is bounded
// by the writer (--decision-max-candidates); what is left unbounded is the
// hash chains, 8 bytes per block of the prompt, which the longest prompts
// make larger than the broker's default limit on their own. FitDecisionChains
// cuts them to the space the rest of the record leaves.

// FitDecisionChains shortens d's hash chains to prefixes so that d encodes
// in at most budget bytes, given that it encodes in size bytes now (the
// length of Marshal(d)). Each shortened chain gets a new HashChain that
// records how many blocks it left out; the hash slices are resliced, never
// written, so they may be shared with the request. The decode worker's
// chain (block_size) gets the space first, since approximate mode predicts
// from it; the others get what remains, smallest block size first.
//
// It reports whether d now fits: false when even chains of no blocks leave
// the record over budget, for the caller to refuse.
func FitDecisionChains(d *pb.DecisionRecord, size, budget int) bool {
	if size <= budget {
		return true
	}
	chains := d.GetChains()
	// left is what the chains may take beyond each one's empty form (its
	// block size and how many blocks it omits), which every chain keeps so
	// the record says what it left out.
	left := budget - size
	empty := make([]int, len(chains))
	for i, c := range chains {
		whole := uint64(len(c.GetBlockHashes())) + uint64(c.GetOmittedBlocks())
		empty[i] = chainFieldSize(c.GetBlockSize(), 0, clampOmitted(whole))
		left += chainFieldSize(c.GetBlockSize(), len(c.GetBlockHashes()), c.GetOmittedBlocks()) - empty[i]
	}
	fitted := make([]*pb.HashChain, len(chains))
	for _, first := range []bool{true, false} {
		for i, c := range chains {
			if (c.GetBlockSize() == d.GetBlockSize()) != first {
				continue
			}
			hashes := c.GetBlockHashes()
			whole := uint64(len(hashes)) + uint64(c.GetOmittedBlocks())
			n := fitBlocks(c.GetBlockSize(), len(hashes), whole, left+empty[i])
			omitted := clampOmitted(whole - uint64(n))
			fitted[i] = &pb.HashChain{BlockSize: c.GetBlockSize(), BlockHashes: hashes[:n:n], OmittedBlocks: omitted}
			left -= chainFieldSize(c.GetBlockSize(), n, omitted) - empty[i]
		}
	}
	d.Chains = fitted
	return left >= 0
}

// DecisionChainsSize is the encoded size of d's chains field: a lower
// bound of the record's size that costs no encoding. A caller can cut the
// chains by it (FitDecisionChains(d, DecisionChainsSize(d), budget)) before
// encoding a record whose chains alone are over the budget, so a prompt of
// millions of blocks is never encoded whole.
func DecisionChainsSize(d *pb.DecisionRecord) int {
	n := 0
	for _, c := range d.GetChains() {
		n += chainFieldSize(c.GetBlockSize(), len(c.GetBlockHashes()), c.GetOmittedBlocks())
	}
	return n
}

// fitBlocks is the most leading blocks of a chain of whole blocks (of
// which have are at hand) whose chains field fits in left bytes; 0 when
// none does.
func fitBlocks(blockSize uint32, have int, whole uint64, left int) int {
	n := min(have, max(0, left/8))
	for n > 0 && chainFieldSize(blockSize, n, clampOmitted(whole-uint64(n))) > left {
		// The field's overhead is at most a few dozen bytes: a handful of
		// steps back.
		n--
	}
	return n
}

// chainFieldSize is the encoded size of one element of the chains field
// (tag, length, body) for a chain of n hashes.
func chainFieldSize(blockSize uint32, n int, omitted uint32) int {
	body := 0
	if blockSize != 0 {
		body += 1 + protowire.SizeVarint(uint64(blockSize))
	}
	if n > 0 {
		body += 1 + protowire.SizeVarint(uint64(8*n)) + 8*n
	}
	if omitted != 0 {
		body += 1 + protowire.SizeVarint(uint64(omitted))
	}
	return protowire.SizeTag(decisionChainsField) + protowire.SizeVarint(uint64(body)) + body
}

// clampOmitted is a count of omitted blocks as the field holds it. Chains
// are bounded by the prompt (at most 2^32 tokens), so it never clamps in
// practice.
func clampOmitted(n uint64) uint32 { return uint32(min(n, 1<<32-1)) }
