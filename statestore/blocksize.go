package statestore

import (
	"fmt"

	"github.com/pdrouter/pdrouter/decider"
)

// "KV block size mismatch": a silent failure made as loud as missing KV
// events (kvhealth.go). A worker registered with block_size 16 whose
// engine publishes pages of 1 token (SGLang's default page size) has its
// blocks hashed in 1-token blocks, as its events say, while the router
// hashes every prompt in 16-token blocks for it: its prefix overlap is
// always 0, GET /v1/workers still counts its cached blocks, and nothing
// fails.
//
// Rule, per (worker, dp rank) of the view, with E the block_size of the
// latest BlockStored applied for it and R its registered block_size:
//
//	mismatch = E > 0 and R > 0 and E ≠ R
//
// E comes from the kv-events topic alone, where all of a worker's records
// sit in one partition (keyed by worker id), so "latest" is the log order,
// the same on every replica; R is the latest registration. The flag is a
// function of the two current values, so it does not depend on how a
// replica interleaves the two topics. Removals, clears and source resets
// say nothing about the block size and leave E as it is: an engine that
// restarts with the right size clears the flag with its first BlockStored.
// E is stored in the slot's health key ('h') so that a restart keeps it;
// a tombstone forgets it with the worker's other state. The flag, its
// gauge and its log are derived (memory). Every mode: KV events still
// apply in approximate mode.

// noteEventBlockSize records the block size of a BlockStored event.
func (st *state) noteEventBlockSize(slot int32, bs uint32) {
	if ws := st.workers[slot]; ws.eventBlockSize != bs {
		ws.eventBlockSize = bs
		st.markHealth(slot)
	}
}

// blockSizeMismatch applies the rule above to one slot.
func (st *state) blockSizeMismatch(slot int32) bool {
	ws := st.workers[slot]
	reg := st.regs[ws.wr.id]
	return ws.eventBlockSize > 0 && reg != nil && reg.GetBlockSize() > 0 && reg.GetBlockSize() != ws.eventBlockSize
}

// blockSizeNote says what is wrong with a flagged slot, why it matters
// and the two ways to fix it.
func (st *state) blockSizeNote(slot int32) string {
	ws := st.workers[slot]
	reg, ev := st.regs[ws.wr.id].GetBlockSize(), ws.eventBlockSize
	return fmt.Sprintf("worker %s is registered with block_size %d but its engine publishes KV events with block_size %d: "+
		"the router hashes prompts in blocks of %d for this worker, and its cached blocks, hashed in blocks of %d, never match, "+
		"so its prefix overlap is always 0 while its cached blocks are still counted. Register it with block_size %d, "+
		"or start the engine with a block (page) size of %d", ws.wr.ref(), reg, ev, reg, ev, ev, reg)
}

// KvBlockSize reports the block size of the worker's latest BlockStored
// event (0 before any), and whether it differs from the registered block
// size (the rule above), with a note that says what is wrong and how to
// fix it. GET /v1/workers shows all three.
func (v View) KvBlockSize(ref decider.WorkerRef) (eventsBlockSize int, mismatch bool, note string) {
	if ref < 0 || int(ref) >= len(v.st.viewSlots) {
		return 0, false, ""
	}
	slot := v.st.viewSlots[ref]
	bs := int(v.st.workers[slot].eventBlockSize)
	if !v.st.blockSizeMismatch(slot) {
		return bs, false, ""
	}
	return bs, true, v.st.blockSizeNote(slot)
}

// blockSizeFlag logs and counts the rule above (slotflag.go).
var blockSizeFlag = slotFlag{
	holds: (*state).blockSizeMismatch,
	last:  func(ws *slotState) *bool { return &ws.bsMismatch },
	enter: "statestore: KV block size mismatch",
	leave: "statestore: KV block size no longer mismatched",
	details: func(st *state, slot int32) []any {
		ws := st.workers[slot]
		return []any{"registered_block_size", st.regs[ws.wr.id].GetBlockSize(), "events_block_size", ws.eventBlockSize, "note", st.blockSizeNote(slot)}
	},
}
