package statestore

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/pdrouter/pdrouter/decider"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
)

// "KV events missing": the known silent failure of conditional
// disaggregation made loud (conditional-disagg.md, "Requirements and loud
// failures"). A decode worker whose engine publishes no KV events looks, to
// the router, like a worker with an empty cache: its effective-ISL ratio
// is always 1.0, so with conditional disaggregation on it can never
// bypass remote prefill, and nothing fails.
//
// Rule, per registered decode (worker, dp rank), with A =
// Options.KvEventsMissingAfter and now the state's event-time clock (the
// max event time of every topic, the clock load ages use):
//
//	from    = max(first load sample time, latest kv-events time)
//	missing = latest load time − from > A   (load for longer than A with no KV event since)
//	      and now − latest load time ≤ A    (and load still coming: a worker that
//	                                         stopped sending load is another failure)
//	      and the latest sample is not idle (it runs or queues a request, or
//	                                         does not say: an idle worker has
//	                                         nothing to publish)
//
// So it covers both "load for longer than A and no KV event ever" and "no
// KV event for longer than A while load keeps coming". Never in
// approximate mode, which expects no KV events.
//
// The inputs are a min and maxes over the records seen, so they do not
// depend on apply order; they are stored (key 'h') so that a restart
// keeps them: a store that forgot the latest KV event would flag every
// worker after a restart. A tombstone resets them with the worker's other
// state. The flag itself, its gauge and its log are derived (memory).

// markHealth queues a slot's health key for writing at the end of the
// chunk (flushHealth): one write per slot per chunk, not per record.
func (st *state) markHealth(slot int32) {
	if ws := st.workers[slot]; !ws.healthDirty {
		ws.healthDirty = true
		st.healthDirty = append(st.healthDirty, slot)
	}
}

func (st *state) noteLoadTime(slot int32, t int64) {
	ws := st.workers[slot]
	if !ws.hasFirstLoad || t < ws.firstLoadAt {
		ws.firstLoadAt, ws.hasFirstLoad = t, true
		st.markHealth(slot)
	}
}

// flushHealth writes the queued health keys. The key is absent when there
// is nothing to say (after a tombstone), so equal states have equal keys.
func (st *state) flushHealth(b *pebble.Batch) {
	for _, slot := range st.healthDirty {
		ws := st.workers[slot]
		ws.healthDirty = false
		k := workerRankKey(nil, famHealth, ws.wr.id, ws.wr.rank)
		if ws.healthEmpty() {
			_ = b.Delete(k, nil)
			continue
		}
		_ = b.Set(k, healthValue(ws), nil)
	}
	st.healthDirty = st.healthDirty[:0]
}

// healthEmpty reports whether a slot has no health to keep: its 'h' key is
// absent. A slot with health is never freed (freeQueued): the slot made
// again for its worker would start from zero and write that over the key.
func (ws *slotState) healthEmpty() bool {
	return !ws.hasFirstLoad && ws.lastKvAt == 0 && ws.eventBlockSize == 0
}

func healthValue(ws *slotState) []byte {
	v := []byte{0}
	if ws.hasFirstLoad {
		v[0] = 1
	}
	v = binary.LittleEndian.AppendUint64(v, uint64(ws.firstLoadAt))
	v = binary.LittleEndian.AppendUint64(v, uint64(ws.lastKvAt))
	return binary.LittleEndian.AppendUint32(v, ws.eventBlockSize)
}

// loadHealth is the rebuild path of a 'h' key. A 17-byte value was written
// before the events' block size was kept (blocksize.go): it reads as "no
// BlockStored seen", which the worker's next one corrects.
func (st *state) loadHealth(slot int32, v []byte) error {
	if len(v) != 17 && len(v) != 21 {
		return errBadKey
	}
	ws := st.workers[slot]
	ws.hasFirstLoad = v[0]&1 != 0
	ws.firstLoadAt = int64(binary.LittleEndian.Uint64(v[1:]))
	ws.lastKvAt = int64(binary.LittleEndian.Uint64(v[9:]))
	ws.eventBlockSize = 0
	if len(v) == 21 {
		ws.eventBlockSize = binary.LittleEndian.Uint32(v[17:])
	}
	return nil
}

// resetHealth forgets a slot's KV-event health (tombstone).
func (st *state) resetHealth(slot int32) {
	ws := st.workers[slot]
	ws.firstLoadAt, ws.hasFirstLoad, ws.lastKvAt, ws.eventBlockSize = 0, false, 0, 0
	st.markHealth(slot)
}

// kvEventsMissing applies the rule above to one slot.
func (st *state) kvEventsMissing(slot int32) bool {
	after := st.act.cfg.kvMissingAfter
	ws := st.workers[slot]
	if st.act.cfg.approxTTL > 0 || !ws.hasLoad || !ws.hasFirstLoad {
		return false
	}
	if reg := st.regs[ws.wr.id]; reg == nil || reg.GetPool() != pb.Pool_POOL_DECODE {
		return false
	}
	last := ws.load.GetSampleTimeUnixNano()
	from := max(ws.firstLoadAt, ws.lastKvAt)
	return last-from > after && st.now-last <= after && !idle(ws.load)
}

// idle reports whether a load sample says its worker runs and queues no
// request. Such a worker computes and evicts no blocks, so it has no KV
// event to publish: its silence is no evidence. A sample that does not
// say counts as busy.
func idle(s *pb.LoadSample) bool {
	return s.NumRequestsRunning != nil && s.GetNumRequestsRunning() == 0 && s.GetNumRequestsWaiting() == 0
}

// kvEventsNote says what is wrong with a slot flagged missing, and why it
// matters.
func (st *state) kvEventsNote(slot int32) string {
	ws := st.workers[slot]
	last := ws.load.GetSampleTimeUnixNano()
	var what string
	if ws.lastKvAt == 0 {
		what = fmt.Sprintf("has sent load samples for %s (event time) but never a KV event", time.Duration(last-ws.firstLoadAt).Round(time.Millisecond))
	} else {
		what = fmt.Sprintf("has sent load samples for %s (event time) since its latest KV event", time.Duration(last-max(ws.firstLoadAt, ws.lastKvAt)).Round(time.Millisecond))
	}
	return fmt.Sprintf("decode worker %s %s: the router sees no cached prefix on it, so its effective-ISL ratio is always 1.0 and, "+
		"with conditional disaggregation on, it can never bypass remote prefill. Check that the engine publishes KV events "+
		"and that ingest reads its kv_events_endpoint, or run the router in approximate mode", ws.wr.ref(), what)
}

func (wr workerRank) ref() string {
	if wr.rank == 0 {
		return wr.id
	}
	return fmt.Sprintf("%s (dp rank %d)", wr.id, wr.rank)
}

// KvEventsMissing reports whether a decode worker sends load samples but no
// KV events (the rule above), with a note that says what is wrong and why
// it matters; false and "" otherwise, and always in approximate mode.
// GET /v1/workers shows both.
func (v View) KvEventsMissing(ref decider.WorkerRef) (missing bool, note string) {
	if ref < 0 || int(ref) >= len(v.st.viewSlots) {
		return false, ""
	}
	slot := v.st.viewSlots[ref]
	if !v.st.kvEventsMissing(slot) {
		return false, ""
	}
	return true, v.st.kvEventsNote(slot)
}

// kvMissingFlag logs and counts the rule above (slotflag.go).
var kvMissingFlag = slotFlag{
	holds:   (*state).kvEventsMissing,
	last:    func(ws *slotState) *bool { return &ws.kvMissing },
	enter:   "statestore: KV events missing",
	leave:   "statestore: KV events no longer missing",
	details: func(st *state, slot int32) []any { return []any{"note", st.kvEventsNote(slot)} },
}
