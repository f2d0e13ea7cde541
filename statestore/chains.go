package statestore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
)

// The hash chains of active requests (active.go) are held in memory only.
//
// Why: a request's entry changes when it starts, when its prefill is done
// and when it ends; with its chain in the value (~8 KB for a 16k-token
// prompt) every change rewrote the chain through Pebble's memtable, flushes
// and compactions, on every replica, for every decision of the group. An
// entry now stores the chain's length and the position of the decision
// record that holds it (encodeEntry), ~100 bytes.
//
// Invariants, kept here and in active.go:
//
//   - The keyspace, and so the digest, does not depend on whether a chain
//     is held: an entry's value names its chain by length and position, and
//     both are facts of the log. The position is the lowest one its record
//     was read at while the chain is held (applyDecision), so it does not
//     depend on the order in which partitions were read either.
//   - At Open (rebuild.go) each entry whose stored chain length is not 0
//     reads its decision record back from the decisions topic at that
//     position (Options.Records), decodes it as apply does
//     (events.DecodeForApply) and takes the chain that apply took
//     (activeChain): the memory after Open is the memory before the close.
//   - A chain that cannot be read back (no Options.Records, the record
//     deleted by retention, a broker that does not answer within
//     chainRecoveryTimeout, a record that is not the one named) is "lost":
//     its blocks count as blocks without a hash (reqEntry.lost), so the
//     decode worker's active block count is still right and only
//     MatchActive misses them, until the request ends or expires (at most
//     ActiveExpiry after its last event). Counted in
//     pdrouter_statestore_active_chains_read_back_total{result="lost"} and
//     logged.
//   - Memory: the chains held are bounded by the requests in flight (an
//     entry drops its chain when the request ends) and each by its record's
//     size; pdrouter_statestore_active_chain_bytes shows them, and they
//     count in the process's memory limit (--memory-limit) like the rest
//     of the state.

// RecordReader reads one record by its position (events/logread.Reader
// implements it). The store reads decision records back with it at Open.
type RecordReader interface {
	Read(ctx context.Context, topic string, partition int32, offset int64) (*kgo.Record, error)
}

// chainRecoveryTimeout bounds the reads of chains at Open: a replica whose
// broker does not answer opens anyway, with the chains it could not read
// counted as lost.
const chainRecoveryTimeout = 30 * time.Second

// chainReaders is how many records are read back at once at Open.
const chainReaders = 8

// Results of pdrouter_statestore_active_chains_read_back_total.
const (
	chainRecovered = "recovered"
	chainLost      = "lost"
)

// setChain replaces the chain an entry holds, keeping the count of held
// hashes. A lost chain is forgotten with it.
func (st *state) setChain(e *reqEntry, chain []uint64) {
	st.act.chainBlocks += int64(len(chain)) - int64(len(e.chain))
	e.chain, e.lost = chain, 0
}

// recoverChains reads back the chains of the entries that had one when
// they were stored (decodeEntry leaves their length in lost). Called by
// rebuild before any entry contributes. Returns how many were recovered
// and lost.
func (s *Store) recoverChains(st *state, entries []*reqEntry) (recovered, lost int) {
	var want []*reqEntry
	for _, e := range entries {
		// A decision no longer present at the stored clock is dropped by
		// the refresh that follows: its chain is not worth a read.
		if e.lost > 0 && e.flags&fDecision != 0 && e.tD+st.act.cfg.retention > st.reqNow {
			want = append(want, e)
		}
	}
	if len(want) == 0 {
		return 0, 0
	}
	chains := make([][]uint64, len(want))
	if r := s.opts.Records; r != nil {
		ctx, cancel := context.WithTimeout(context.Background(), chainRecoveryTimeout)
		defer cancel()
		topic := s.opts.Names.Physical(events.TopicDecisions)
		if s.opts.Source != SourceDecisions {
			topic = s.opts.Names.Physical(events.TopicLoadDeltas)
		}
		var wg sync.WaitGroup
		next := make(chan int)
		for range min(chainReaders, len(want)) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range next {
					c, err := s.readChain(ctx, r, topic, want[i])
					if err != nil {
						s.log.Debug("statestore: an active request's chain was not read back", "entry", want[i].id,
							"partition", want[i].partition, "offset", want[i].offset, "err", err)
					}
					chains[i] = c
				}
			}()
		}
		for i := range want {
			next <- i
		}
		close(next)
		wg.Wait()
	}
	for i, e := range want {
		if chains[i] == nil {
			lost++
			continue
		}
		st.setChain(e, chains[i]) // readChain checked its length
		recovered++
	}
	s.met.chainsRead.WithLabelValues(chainRecovered).Add(float64(recovered))
	s.met.chainsRead.WithLabelValues(chainLost).Add(float64(lost))
	switch {
	case lost > 0 && s.opts.Records == nil:
		// A tool's store (digest, inspection): no log to read from, by
		// choice.
		s.log.Info("statestore: opened without a decisions topic reader; active requests' hash chains not read back",
			"lost", lost)
	case lost > 0:
		s.log.Warn("statestore: active requests' hash chains could not be read back from the decisions topic; their blocks count without their hashes until the requests end",
			"lost", lost, "recovered", recovered)
	}
	return recovered, lost
}

var errNotTheChain = errors.New("the record at the stored position is not the entry's decision, or its chain has another length")

// readChain reads e's decision record at its stored position and returns
// the chain apply took from it.
func (s *Store) readChain(ctx context.Context, r RecordReader, topic string, e *reqEntry) ([]uint64, error) {
	rec, err := r.Read(ctx, topic, e.partition, e.offset)
	if err != nil {
		return nil, err
	}
	env, err := events.DecodeForApply(s.opts.Names, rec, s.opts.Approximate)
	if err != nil {
		return nil, fmt.Errorf("decode: %w", err)
	}
	var chain []uint64
	switch m := env.Message.(type) {
	case *pb.DecisionRecord:
		if "d"+m.GetDecisionId() != e.id {
			return nil, errNotTheChain
		}
		chain, _, _ = activeChain(m)
	case *pb.LoadDelta:
		// The entry's chain as apply resolved it (shared hashes first).
		i := slices.IndexFunc(m.GetDecisions(), func(d *pb.DecisionDelta) bool {
			return "d"+d.GetDecisionId() == e.id || string(openEntryID(nil, d.GetDecisionId(), e.partition)) == e.id
		})
		if i < 0 {
			return nil, errNotTheChain
		}
		chain = events.LoadDeltaChains(m)[i]
	default:
		return nil, errNotTheChain
	}
	if int64(len(chain)) != e.lost {
		return nil, errNotTheChain
	}
	return chain, nil
}
