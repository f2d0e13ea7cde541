package statestore

import (
	"encoding/binary"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
	"google.golang.org/protobuf/proto"

	pb "github.com/pdrouter/pdrouter/events/eventspb"
)

// rebuild derives the whole in-memory state from Pebble: this is the only
// way memory is filled at start, so memory is a function of the store
// (invariant 3). Keys are read in order, so slots are numbered in
// worker-id order after a restart.
func (s *Store) rebuild() (*state, error) {
	st := newState(s.activeConfig())
	st.idx.m.loading = true // until relayout, below
	it, err := s.db.NewIter(nil)
	if err != nil {
		return nil, err
	}
	defer it.Close()
	var entries, opens []*reqEntry
	for it.First(); it.Valid(); it.Next() {
		k, v := it.Key(), it.Value()
		if len(k) == 0 {
			continue
		}
		body := k[1:]
		switch k[0] {
		case famMeta:
			switch string(k) {
			case string(keyNow):
				st.now = int64(binary.LittleEndian.Uint64(v))
			case string(keyReqNow):
				st.reqNow = int64(binary.LittleEndian.Uint64(v))
			}
		case famOffset:
			t, p, err := parseOffsetKey(body)
			if err != nil || len(v) != 8 {
				return nil, fmt.Errorf("offset key %q: %v", k, errBadKey)
			}
			st.offsets[topicPartition{t, p}] = int64(binary.LittleEndian.Uint64(v))
		case famRegistry:
			r := &pb.WorkerRegistration{}
			if err := proto.Unmarshal(v, r); err != nil {
				return nil, fmt.Errorf("registration %q: %w", body, err)
			}
			st.regs[string(body)] = r
			st.viewDirty = true
		case famTomb:
			st.tombs[string(body)] = int64(binary.LittleEndian.Uint64(v))
		case famWorkerUp:
			if err := st.loadWorkerHealth(string(body), v); err != nil {
				return nil, fmt.Errorf("worker health %q: %w", body, err)
			}
			st.viewDirty = true
		case famLoad:
			id, rank, _, err := parseWorkerRank(body)
			if err != nil {
				return nil, err
			}
			ls, err := loadFromStore(v)
			if err != nil {
				return nil, fmt.Errorf("load sample of %s: %w", id, err)
			}
			st.setLoad(st.slotOf(id, rank), ls)
		case famPrefix:
			id, rank, rest, err := parseWorkerRank(body)
			orphan := len(v) == 9 && v[8]&flagOrphan != 0
			if err != nil || len(rest) != 8 || (len(v) != 17 && !orphan) {
				return nil, fmt.Errorf("prefix key %q: %v", k, errBadKey)
			}
			var up uint64
			if !orphan {
				up = binary.LittleEndian.Uint64(v[9:])
			}
			st.loadBlock(st.slotOf(id, rank), binary.BigEndian.Uint64(rest), binary.LittleEndian.Uint64(v), up, v[8])
		case famHealth:
			id, rank, _, err := parseWorkerRank(body)
			if err != nil {
				return nil, err
			}
			if err := st.loadHealth(st.slotOf(id, rank), v); err != nil {
				return nil, fmt.Errorf("health key %q: %w", k, err)
			}
		case famLatency:
			if len(body) > 0 && body[0] == 'e' {
				if err := st.lat.Restore(string(body[1:]), v); err != nil {
					return nil, fmt.Errorf("latency model entry %q: %w", body[1:], err)
				}
			}
		case famOpen:
			if err := st.restoreOpenKey(k, v, &opens); err != nil {
				return nil, err
			}
		case famActive:
			if st.act.open != nil {
				return nil, fmt.Errorf("%w: it holds requests as facts and is opened to hold them in memory (Options.PeerSums)", ErrWrongSource)
			}
			e, err := decodeEntry(string(body), v)
			if err != nil {
				return nil, fmt.Errorf("active entry %q: %w", body, err)
			}
			entries = append(entries, e)
		}
	}
	if err := it.Error(); err != nil {
		return nil, err
	}
	// Active entries after the registry and slots exist: they only add
	// their contribution, no fact changes, so nothing is written.
	b := s.db.NewBatch()
	defer b.Close()
	for _, e := range entries {
		st.act.entries[e.id] = e
		if e.flags&fDecision != 0 {
			st.resolveSlots(e)
			st.noteDecision(e)
		}
	}
	for _, e := range opens {
		st.act.entries[e.id] = e
		st.resolveSlots(e)
		st.noteDecision(e)
	}
	// Their chains, from the log (chains.go), before they contribute.
	s.recoverChains(st, append(entries, opens...))
	for _, e := range entries {
		st.refresh(b, e, false)
	}
	if st.act.open != nil {
		if err := st.restoreOpen(opens); err != nil {
			return nil, err
		}
	}
	// The latency model's sums, from its entries (entries whose facts left the
	// window since they were stored are written again, or deleted).
	st.lat.Rebuilt(st.reqNow)
	st.flushLatency(b)
	if !b.Empty() {
		// Facts that expired at the stored clock but were not swept yet
		// (cannot happen after a clean sweep; tolerated).
		if err := b.Commit(pebble.NoSync); err != nil {
			return nil, err
		}
	}
	// The request ids of the request index, before any lookup can ask.
	if err := s.loadRequests(st); err != nil {
		return nil, fmt.Errorf("request index: %w", err)
	}
	// Approximate mode's predictions, from the decision records of the last
	// TTL (approx.go). Decision records need no memory: Pebble serves them.
	if err := s.rebuildPredictions(st); err != nil {
		return nil, fmt.Errorf("approximate mode predictions: %w", err)
	}
	st.healthDirty = st.healthDirty[:0]
	for _, ws := range st.workers {
		ws.healthDirty = false
	}
	// Pebble returned each worker's blocks in engine-hash order, which is
	// random; put the hot index's arena in chain order for MatchPrefix.
	st.idx.m.relayout()
	st.unregSlots = 0
	for id, slots := range st.byID {
		if st.regs[id] == nil {
			st.unregSlots += len(slots)
		}
	}
	st.unregHealth = 0
	for id := range st.health {
		if st.regs[id] == nil {
			st.unregHealth++
		}
	}
	st.rebuildView()
	st.stats = applyStats{}
	return st, nil
}
