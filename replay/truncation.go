package replay

import (
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/pdrouter/pdrouter/decider"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
)

// Truncation describes what a decision record left out to stay within its
// size budget (the writer's --decision-max-candidates and
// --decision-record-max-bytes). An explanation of such a record states it,
// because the checks then cover only what was kept.
type Truncation struct {
	// CandidatesKept rows are in the record: the picked workers and the
	// best ranked others. Omitted* count the rows left out.
	CandidatesKept  int              `json:"candidates_kept"`
	OmittedDecode   int              `json:"omitted_decode"`
	OmittedPrefill  int              `json:"omitted_prefill"`
	OmittedEligible int              `json:"omitted_eligible"`
	Chains          []TruncatedChain `json:"chains,omitempty"`
	// Notes say, in words, what each omission means for the pure and the
	// state check.
	Notes []string `json:"notes"`
}

// TruncatedChain is a hash chain the record keeps only a prefix of.
type TruncatedChain struct {
	BlockSize   int `json:"block_size"`
	KeptBlocks  int `json:"kept_blocks"`
	TotalBlocks int `json:"total_blocks"`
}

// TruncationOf is rec's truncation, or nil when the record is whole.
func TruncationOf(rec *pb.DecisionRecord) *Truncation {
	o := rec.GetOmittedCandidates()
	t := &Truncation{CandidatesKept: len(rec.GetCandidates()), OmittedDecode: int(o.GetDecode()),
		OmittedPrefill: int(o.GetPrefill()), OmittedEligible: int(o.GetEligible()), Notes: []string{}}
	for _, c := range rec.GetChains() {
		if c.GetOmittedBlocks() > 0 {
			kept := len(c.GetBlockHashes())
			t.Chains = append(t.Chains, TruncatedChain{BlockSize: int(c.GetBlockSize()), KeptBlocks: kept, TotalBlocks: kept + int(c.GetOmittedBlocks())})
		}
	}
	omitted := t.OmittedDecode + t.OmittedPrefill
	if omitted == 0 && len(t.Chains) == 0 {
		return nil
	}
	if omitted > 0 {
		t.Notes = append(t.Notes, fmt.Sprintf(
			"the record keeps %d of the %d candidate rows (%d decode and %d prefill rows left out, %d of them eligible): the picked workers and the best ranked others, so no omitted eligible row cost less than a kept one of its pool; the pure check recomputes over the kept rows, which at temperature 0 reproduces the decision, while softmax probabilities (temperature > 0) were drawn over every eligible row and cannot be recomputed from the kept ones",
			t.CandidatesKept, t.CandidatesKept+omitted, t.OmittedDecode, t.OmittedPrefill, t.OmittedEligible))
	}
	for _, c := range t.Chains {
		t.Notes = append(t.Notes, fmt.Sprintf(
			"the hash chain for block size %d keeps its first %d of %d blocks: the recorded overlaps were computed over the whole chain, but the state check can recompute them only over the kept %d blocks, and so compares the recorded overlaps capped at %d",
			c.BlockSize, c.KeptBlocks, c.TotalBlocks, c.KeptBlocks, c.KeptBlocks))
	}
	return t
}

// omittedRows reports whether rec left candidate rows out.
func omittedRows(rec *pb.DecisionRecord) bool {
	o := rec.GetOmittedCandidates()
	return o.GetDecode()+o.GetPrefill() > 0
}

// keptChain is the number of blocks rec keeps of its chain for blockSize,
// and whether that chain is cut short.
func keptChain(rec *pb.DecisionRecord, blockSize int) (int, bool) {
	for _, c := range rec.GetChains() {
		if int(c.GetBlockSize()) == blockSize {
			return len(c.GetBlockHashes()), c.GetOmittedBlocks() > 0
		}
	}
	return 0, false
}

// stateExpectation is what the state check compares a decision from the
// rebuilt state with, for a record that may be truncated, and the scope of
// that comparison in words (nil for a whole record).
//
// A chain cut to a prefix lets the rebuilt index be asked about the kept
// blocks only, so the record's overlaps (device, then host, then disk
// blocks, and the shared active blocks) are capped at the kept length and
// the decision is recomputed from the record so capped: that is the
// decision the record implies over the prefix, and the one the rebuilt
// state must reproduce. Rows the record left out have nothing to compare
// with, so the rebuilt decision's table is cut to the recorded rows
// (sameRows).
func stateExpectation(rec *pb.DecisionRecord, cfg decider.Config) (*decider.Decision, []string, error) {
	t := TruncationOf(rec)
	if t == nil {
		return DecisionOf(rec), nil, nil
	}
	var scope []string
	if t.OmittedDecode+t.OmittedPrefill > 0 {
		scope = append(scope, fmt.Sprintf("compared over the %d candidate rows the record keeps; the %d it left out are dropped from the rebuilt table",
			t.CandidatesKept, t.OmittedDecode+t.OmittedPrefill))
	}
	if len(t.Chains) == 0 {
		return DecisionOf(rec), scope, nil
	}
	capped := proto.Clone(rec).(*pb.DecisionRecord)
	for _, c := range capped.GetCandidates() {
		kept, cut := keptChain(capped, int(c.GetBlockSize()))
		if !cut {
			continue
		}
		left := uint32(kept)
		c.OverlapBlocks = min(c.OverlapBlocks, left)
		left -= c.OverlapBlocks
		c.HostBlocks = min(c.HostBlocks, left)
		left -= c.HostBlocks
		c.DiskBlocks = min(c.DiskBlocks, left)
		c.SharedActiveBlocks = min(c.SharedActiveBlocks, int64(kept))
	}
	for _, c := range t.Chains {
		scope = append(scope, fmt.Sprintf("overlaps for block size %d recomputed over the first %d of %d blocks (the prefix the record keeps), and compared with the recorded overlaps capped at %d",
			c.BlockSize, c.KeptBlocks, c.TotalBlocks, c.KeptBlocks))
	}
	d, err := Recompute(capped, cfg)
	return d, scope, err
}

// sameRows is d with only the candidate rows rec records (by worker and
// pool), for a record that left rows out; d itself otherwise.
func sameRows(rec *pb.DecisionRecord, d *decider.Decision) *decider.Decision {
	if !omittedRows(rec) {
		return d
	}
	type row struct {
		w string
		p decider.Pool
	}
	kept := make(map[row]bool, len(rec.GetCandidates()))
	for _, c := range rec.GetCandidates() {
		kept[row{workerID(c.GetWorker()), poolOf(c.GetPool())}] = true
	}
	out := *d
	out.Candidates = nil
	for _, c := range d.Candidates {
		if kept[row{c.Worker, c.Pool}] {
			out.Candidates = append(out.Candidates, c)
		}
	}
	return &out
}
