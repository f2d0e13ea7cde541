package statestore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pdrouter/pdrouter/events"
)

// MaterializerOptions configure a Materializer.
type MaterializerOptions struct {
	// Client holds the connection options (seed brokers, TLS, SASL), e.g.
	// from kafkaconn.Config.Opts. Consumer options are the materializer's.
	Client []kgo.Opt
	// Consumer, when set, gives options of the client that tails the log
	// alone, not of the one that lists partitions: e.g. kafkaconn.Metrics.
	// It is called for every consumer client the materializer creates (it
	// creates one again after an error), because such hooks keep the state
	// of one client: shared with its closed predecessor, whose last hooks
	// may still run, they would race.
	Consumer func() []kgo.Opt
	// Logger; default: the store's.
	Logger *slog.Logger
	// ProgressEvery is the interval of progress logs and lag checks while
	// catching up; default 10 s.
	ProgressEvery time.Duration
	// DiscoverEvery is how often new partitions are looked for; default 30 s.
	DiscoverEvery time.Duration
	// FetchMinBytes and FetchMaxWait batch the log for apply: the broker
	// answers a fetch once it holds FetchMinBytes for this replica, or
	// when FetchMaxWait has passed with less. Defaults 1 byte and 500 ms:
	// every record is fetched as soon as it is written.
	//
	// Why batch: under load a replica tails its own decisions and every
	// other replica's, so with 1 byte the broker answers a fetch per
	// handful of records, and those fetch round trips were a large part of
	// the broker's CPU per decision (`bench api`: 175 µs per decision
	// with 1 byte, 146 µs with 256 KiB and 10 ms). The price is up to
	// FetchMaxWait more apply lag when the log is quiet, which delays
	// `after` (read-your-writes) waits and the replica's view of its
	// peers' decisions by as much; its own decisions count at once
	// (RecordLocalDecision). franz-go takes waits of 10 ms and more.
	FetchMinBytes int32
	FetchMaxWait  time.Duration
}

// Materializer tails every partition of the topics the store's Source
// reads into a Store, or
// of the store's cell (Options.Cell) only.
//
// It consumes directly, with no consumer group: every replica reads every
// partition, and its position is the offset vector stored in Pebble, not a
// group commit. A partition the store has offsets for resumes exactly there;
// one it never saw starts at the log start. The reset policy is "none"
// (kgo.NoResetOffset): if a stored offset is no longer in the log
// (retention passed it, or the topic was recreated), skipping or re-reading
// silently would corrupt the state, so Run returns an error matching
// ErrRebuildNeeded instead, and the operator (or the caller) wipes the
// store or bootstraps it from a snapshot.
type Materializer struct {
	s     *Store
	o     MaterializerOptions
	log   *slog.Logger
	names events.Names
	admin *kgo.Client
	adm   *kadm.Client
	// cl is the consumer. Run's goroutine alone sets it, under mu, and
	// reads it without; Close reads it under mu and sets closed, after
	// which Run sets no consumer and returns: Close may come while Run is
	// still starting (a replica that stops at once).
	mu     sync.Mutex
	cl     *kgo.Client
	closed bool
	known  map[topicPartition]bool
	// oorRetries counts transient OFFSET_OUT_OF_RANGE recoveries per partition.
	oorRetries map[topicPartition]int
	// incomplete is set when the last discovery skipped a partition that
	// answered with an error; discovery then runs every second, not every
	// DiscoverEvery.
	incomplete bool
}

// NewMaterializer connects to Kafka. It does not consume until Run.
func NewMaterializer(s *Store, o MaterializerOptions) (*Materializer, error) {
	if o.Logger == nil {
		o.Logger = s.log
	}
	if o.ProgressEvery <= 0 {
		o.ProgressEvery = 10 * time.Second
	}
	if o.DiscoverEvery <= 0 {
		o.DiscoverEvery = 30 * time.Second
	}
	if o.FetchMinBytes <= 0 {
		o.FetchMinBytes = 1
	}
	if o.FetchMaxWait <= 0 {
		o.FetchMaxWait = 500 * time.Millisecond
	}
	if o.FetchMaxWait < 10*time.Millisecond {
		return nil, fmt.Errorf("statestore: fetch max wait %s: want at least 10ms (franz-go's minimum)", o.FetchMaxWait)
	}
	admin, err := kgo.NewClient(o.Client...)
	if err != nil {
		return nil, fmt.Errorf("statestore: kafka client: %w", err)
	}
	return &Materializer{s: s, o: o, log: o.Logger, names: s.opts.Names, admin: admin, adm: kadm.NewClient(admin), known: map[topicPartition]bool{}}, nil
}

// Close releases the Kafka clients. A Run in progress returns nil.
func (m *Materializer) Close() {
	m.mu.Lock()
	m.closed = true
	cl := m.cl
	m.mu.Unlock()
	if cl != nil {
		cl.Close()
	}
	m.admin.Close()
}

// setConsumer makes cl the consumer, or closes it and reports false when
// the materializer was closed.
func (m *Materializer) setConsumer(cl *kgo.Client) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		if cl != nil {
			cl.Close()
		}
		return false
	}
	m.cl = cl
	return true
}

func (m *Materializer) isClosed() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.closed
}

func (m *Materializer) physicalTopics() []string {
	src := m.s.opts.Source.Topics()
	ts := make([]string, len(src))
	for i, t := range src {
		ts[i] = m.names.Physical(t)
	}
	return ts
}

// discover returns the partitions not consumed yet, with their start
// offsets: the stored next offset, or the log start.
func (m *Materializer) discover(ctx context.Context) (map[string]map[int32]kgo.Offset, error) {
	ends, err := m.adm.ListEndOffsets(ctx, m.physicalTopics()...)
	if err != nil {
		return nil, err
	}
	if err := m.checkCell(ends); err != nil {
		return nil, err
	}
	stored := m.s.Offsets()
	add := map[string]map[int32]kgo.Offset{}
	m.incomplete = false
	ends.Each(func(lo kadm.ListedOffset) {
		if !m.s.opts.Cell.OwnsPartition(lo.Partition) {
			return // another cell's
		}
		if !m.consumes(lo.Topic, lo.Partition, len(ends[lo.Topic])) {
			return // another writer's load deltas
		}
		if lo.Err != nil {
			m.incomplete = true
			return // a topic not created yet, or a partition without a leader: found on a later discovery
		}
		t, ok := m.names.Logical(lo.Topic)
		if !ok {
			return
		}
		tp := topicPartition{t, lo.Partition}
		if m.known[tp] {
			return
		}
		m.known[tp] = true
		off := kgo.NewOffset().AtStart()
		next, ok := stored.Get(t, lo.Partition)
		if ok {
			off = kgo.NewOffset().At(next)
		}
		m.s.met.partitionKnown(t, lo.Partition, next)
		if add[lo.Topic] == nil {
			add[lo.Topic] = map[int32]kgo.Offset{}
		}
		add[lo.Topic][lo.Partition] = off
	})
	return add, nil
}

// consumes reports whether the store reads partition p of the physical
// topic, of n partitions: every one, but for a store of SourceLoadShares,
// which reads of load-deltas only its own writer's partition
// (events.WriterPartition), the one its own deltas go to. Its peers' load
// comes as their rows from load-shares.
func (m *Materializer) consumes(topic string, p int32, n int) bool {
	t, _ := m.names.Logical(topic)
	if m.s.opts.Source == SourceLoadShares && t == events.TopicLoadDeltas {
		own := events.WriterPartition(m.s.opts.ReplicaID, int32(n), m.s.opts.Cell)
		m.s.writerPartition.Store(int64(own)) // WaitApplied waits for it alone
		return p == own
	}
	return true
}

// Run consumes until ctx is done (then it returns nil) or a fatal error.
func (m *Materializer) Run(ctx context.Context) error {
	return m.run(ctx, nil)
}

// CatchUp consumes until the store has applied every record that was in
// the log when it was called, then returns. It is the replay of `state
// rebuild`, benchmarks and tests.
func (m *Materializer) CatchUp(ctx context.Context) error {
	lag, err := m.Lag(ctx)
	// A partition whose end offset is unknown for a moment (a new topic, a
	// leader election) would be left out of the target: ask again. The
	// brokers report that per partition or, for a whole broker's share of
	// the request, as an error.
	for (err == nil && lag.Unknown > 0) || lagErrorRetriable(err) {
		select {
		case <-ctx.Done():
			if err != nil {
				return fmt.Errorf("statestore: catch-up: %w (%w)", err, ctx.Err())
			}
			return fmt.Errorf("statestore: catch-up: %d partitions without an end offset: %w", lag.Unknown, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
		lag, err = m.Lag(ctx)
	}
	if err != nil {
		return err
	}
	target := map[topicPartition]int64{}
	for _, p := range lag.Partitions {
		if p.Lag > 0 {
			target[topicPartition{p.Topic, p.Partition}] = p.End
		}
	}
	return m.run(ctx, func() bool {
		offs := m.s.Offsets()
		for tp, end := range target {
			if n, _ := offs.Get(tp.topic, tp.partition); n < end {
				return false
			}
		}
		return true
	})
}

// lagErrorRetriable reports whether Lag failed only in ways the brokers clear
// by themselves (kerr.IsRetriable: no leader yet, a leader moved), for every
// shard of the request kadm split it into.
func lagErrorRetriable(err error) bool {
	if err == nil {
		return false
	}
	var se *kadm.ShardErrors
	if errors.As(err, &se) {
		for _, e := range se.Errs {
			if !kerr.IsRetriable(e.Err) {
				return false
			}
		}
		return len(se.Errs) > 0
	}
	return kerr.IsRetriable(err)
}

func (m *Materializer) run(ctx context.Context, done func() bool) error {
	if done != nil && done() {
		return nil
	}
	if m.cl == nil {
		var start map[string]map[int32]kgo.Offset
		for {
			var err error
			start, err = m.discover(ctx)
			if err == nil && len(start) > 0 {
				break
			}
			if errors.Is(err, events.ErrCellPartitions) {
				return err
			}
			if m.isClosed() {
				return nil
			}
			if err != nil && ctx.Err() == nil {
				m.log.Warn("statestore: listing partitions failed; retrying", "err", err)
			} else if err == nil {
				m.log.Warn("statestore: no topic to consume yet (not migrated?); retrying", "topics", m.physicalTopics())
			}
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(time.Second):
			}
		}
		opts := append([]kgo.Opt{
			kgo.ConsumePartitions(start),
			kgo.ConsumeStartOffset(kgo.NewOffset().AtStart()),
			kgo.ConsumeResetOffset(kgo.NoResetOffset()),
			kgo.FetchMaxBytes(64 << 20),
			kgo.FetchMaxPartitionBytes(8 << 20),
			kgo.FetchMinBytes(m.o.FetchMinBytes),
			kgo.FetchMaxWait(m.o.FetchMaxWait),
		}, m.o.Client...)
		if m.o.Consumer != nil {
			opts = append(opts, m.o.Consumer()...)
		}
		cl, err := kgo.NewClient(opts...)
		if err != nil {
			return fmt.Errorf("statestore: kafka consumer: %w", err)
		}
		if !m.setConsumer(cl) {
			return nil
		}
	}
	p := newProgress(m.log, m.o.ProgressEvery)
	lastDiscover := time.Now()
	for {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		fs := m.cl.PollFetches(pctx)
		cancel()
		if ctx.Err() != nil || fs.IsClientClosed() {
			if done != nil && ctx.Err() != nil {
				return fmt.Errorf("statestore: catch-up did not finish: %w", ctx.Err())
			}
			return nil
		}
		var fatal error
		restart := false
		fs.EachError(func(topic string, partition int32, err error) {
			if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
				return
			}
			if errors.Is(err, kerr.OffsetOutOfRange) && m.transientOutOfRange(ctx, topic, partition) {
				restart = true
				return
			}
			var loss *kgo.ErrDataLoss
			if errors.Is(err, kerr.OffsetOutOfRange) || errors.As(err, &loss) ||
				errors.Is(err, kerr.InconsistentTopicID) || errors.Is(err, kerr.UnknownTopicID) {
				fatal = fmt.Errorf("%w: %s partition %d: %v (the stored offset is no longer in the log: wipe the store or bootstrap from a snapshot)",
					ErrRebuildNeeded, topic, partition, err)
				return
			}
			m.log.Warn("statestore: fetch error", "topic", topic, "partition", partition, "err", err)
		})
		if fatal != nil {
			return fatal
		}
		if restart {
			// A partition the client gave up on cannot be resumed in place:
			// start a new consumer from the stored offsets (records of this
			// poll are not applied, so nothing is skipped or applied twice).
			m.cl.Close()
			m.setConsumer(nil)
			m.known = map[topicPartition]bool{}
			return m.run(ctx, done)
		}
		recs := fs.Records()
		if len(recs) > 0 {
			if err := m.s.Apply(recs); err != nil {
				return err
			}
			p.add(len(recs))
		}
		if done != nil && done() {
			p.finish()
			return nil
		}
		if every := m.o.DiscoverEvery; time.Since(lastDiscover) >= every || (m.incomplete && time.Since(lastDiscover) >= time.Second) {
			lastDiscover = time.Now()
			add, err := m.discover(ctx)
			if errors.Is(err, events.ErrCellPartitions) {
				return err
			}
			if err == nil && len(add) > 0 {
				m.log.Info("statestore: new partitions", "partitions", fmt.Sprint(add))
				m.cl.AddConsumePartitions(add)
			}
		}
		if p.due() {
			lag, err := m.Lag(ctx)
			if err == nil {
				p.report(lag.Total)
			}
		}
	}
}

// checkCell returns an error matching events.ErrCellPartitions when a
// topic's partition count breaks the store's cell: its records of one
// worker would fall in different cells (events/cell.go). Checked at every
// discovery, because partitions added to a topic move keys.
func (m *Materializer) checkCell(ends kadm.ListedOffsets) error {
	if m.s.opts.Cell.Whole() {
		return nil
	}
	var topics []string
	var counts []int
	for _, t := range m.physicalTopics() {
		if ps, ok := ends[t]; ok {
			topics, counts = append(topics, t), append(counts, len(ps))
		}
	}
	return m.s.opts.Cell.CheckPartitionCounts(topics, counts)
}

// transientOutOfRange tells a real "offset no longer in the log" from a
// broker that briefly refused an offset it does hold (a partition whose
// leader just changed or was just created answers OFFSET_OUT_OF_RANGE for a
// moment). It looks up the partition's log range: when the stored offset is
// inside it, the error is not fatal and the caller restarts the consumer
// from the stored offsets, a bounded number of times per partition.
func (m *Materializer) transientOutOfRange(ctx context.Context, topic string, partition int32) bool {
	t, ok := m.names.Logical(topic)
	if !ok {
		return false
	}
	tp := topicPartition{t, partition}
	if m.oorRetries == nil {
		m.oorRetries = map[topicPartition]int{}
	}
	if m.oorRetries[tp] >= 5 {
		return false
	}
	next, stored := m.s.Offsets().Get(t, partition)
	if !stored {
		next = 0
	}
	starts, err := m.adm.ListStartOffsets(ctx, topic)
	if err != nil {
		return false
	}
	ends, err := m.adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return false
	}
	lo, ok1 := starts.Lookup(topic, partition)
	hi, ok2 := ends.Lookup(topic, partition)
	if !ok1 || !ok2 || lo.Err != nil || hi.Err != nil || next < lo.Offset || next > hi.Offset {
		return false
	}
	m.oorRetries[tp]++
	m.log.Warn("statestore: the broker refused an offset it holds; restarting the consumer from the stored offsets",
		"topic", topic, "partition", partition, "offset", next, "log_start", lo.Offset, "log_end", hi.Offset, "retry", m.oorRetries[tp])
	select {
	case <-ctx.Done():
	case <-time.After(time.Duration(m.oorRetries[tp]) * 200 * time.Millisecond):
	}
	return true
}
