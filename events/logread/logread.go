// Package logread reads single records from Kafka by their exact position,
// or finds one by its partition and timestamp.
//
// The router keeps only a small header of each decision in its local store,
// next to the record's position (partition, offset) in the decisions topic.
// To serve an older decision in full it reads that one record back from
// Kafka. A consumer is the wrong tool for this: it owns partitions, buffers
// ahead, and keeps fetch sessions alive between polls. A Reader instead sends
// one raw Fetch to the partition's leader per lookup and decodes only the
// batch that holds the offset. A decision known without its position is
// found instead (FindNear, find.go): from the first offset of its time,
// which Kafka's time index gives, through a bounded scan forward.
package logread

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The errors Read returns for positions that hold no record to read. They
// are wrapped with the position, so use errors.Is to test for them. An API
// can map each to its own answer: a decision that was deleted by retention
// is gone for good, one not yet written may appear later, and a position
// holding no data record means the stored position is wrong.
var (
	// ErrGone means the offset is below the partition's log start offset:
	// retention (or DeleteRecords) has deleted the record. It will never
	// be readable again.
	ErrGone = errors.New("record deleted: the offset is below the partition's log start offset (retention or DeleteRecords)")

	// ErrNotYet means the offset is at or past the partition's high
	// watermark (or, for a transactional write, its last stable offset):
	// no committed record is there yet.
	ErrNotYet = errors.New("no record yet: the offset is at or past the partition's high watermark")

	// ErrNoRecord means the offset is inside the log but holds no data
	// record: a transaction control record, a record of an aborted
	// transaction, or an offset that compaction removed.
	ErrNoRecord = errors.New("no data record at this offset: a transaction control or aborted record, or compacted away")
)

// partitionMaxBytes is the byte limit of each fetch for its one partition.
// Kafka always returns the whole first batch at the fetch offset, however
// large it is (KIP-74, fetch v3+), and nothing past the limit after it; kfake
// does the same. Asking for a single byte thus returns exactly the batch that
// holds the offset. A larger limit would only make us read, decompress and
// decode the batches that follow it, and since decoded records alias the
// response's buffer, the one record we return would keep all of those bytes
// alive.
//
// The request's own limit (MaxBytes) stays at its default, the largest: with
// a single partition the partition limit is the one that counts. Setting
// MaxBytes to one byte too would be the same on Kafka, but kfake then stops
// the response before it lists the partition's aborted transactions, and a
// read_committed reader would return aborted records as if committed.
const partitionMaxBytes = 1

// isolation is the isolation level of every fetch: read_committed, so a
// Reader sees what the topic's consumers see. A record of an aborted
// transaction is ErrNoRecord, and one of a still open transaction is
// ErrNotYet. For a topic written without transactions this is the same as
// read_uncommitted: its last stable offset is its high watermark.
const isolation = 1

// Reader reads single records by position from a Kafka cluster.
//
// A Reader is safe for concurrent use: it holds no per-lookup state. It
// caches, per topic it has read, the topic's ID and its partitions' leaders,
// so a lookup is usually a single Fetch; a lookup that finds the cache stale
// (a moved leader, a recreated topic, added partitions) refreshes it and
// tries once more. The cache keeps one small entry per topic ever read, for
// the Reader's life: a router reads one or two topics.
type Reader struct {
	cl *kgo.Client

	mu     sync.RWMutex
	topics map[string]*topicMeta // topic name → the last metadata read for it
}

// topicMeta is what a fetch needs to know about a topic. It is never
// modified once cached: a refresh replaces it whole, so readers may use it
// without holding the lock.
type topicMeta struct {
	// id addresses the topic in fetch v13+, which has no topic names.
	// It is zero on brokers older than Kafka 2.8, which then negotiate a
	// version addressing topics by name.
	id [16]byte
	// leaders holds each partition's leader, indexed by partition; -1 when
	// the partition has no leader.
	leaders []int32
}

// New returns a Reader over cl.
//
// The caller owns cl and closes it; the Reader never closes it, so one
// client can serve a Reader and the producers and consumers of the same
// process. The Reader uses only requests that do not depend on cl's
// consuming or producing options.
func New(cl *kgo.Client) *Reader {
	return &Reader{cl: cl, topics: make(map[string]*topicMeta)}
}

// position is a record's place in the log, and the prefix of every error
// about it.
type position struct {
	topic     string
	partition int32
	offset    int64
}

// errorf returns an error naming the position, so that an error read in a
// log says which record could not be read, whatever its cause.
func (p position) errorf(format string, args ...any) error {
	return fmt.Errorf("logread: %s[%d]@%d: "+format, append([]any{p.topic, p.partition, p.offset}, args...)...)
}

// Read returns the record at exactly (topic, partition, offset).
//
// Read fails at once, without a request, for an empty topic name or a
// negative partition or offset: such a position cannot exist, and the
// caller has a bug to know about. A position that can exist but holds no
// record returns an error wrapping ErrGone, ErrNotYet or ErrNoRecord. An
// unknown topic returns an error wrapping kerr.UnknownTopicOrPartition; the
// Reader never asks the broker to create a topic, whatever cl's options. Any
// other failure (the cluster, the network, ctx) returns an error naming the
// position and wrapping the cause.
//
// The returned record's Key, Value and Headers alias the fetched batch, which
// stays in memory while the record does: the one batch (decompressed) that
// held the record, and nothing more.
func (r *Reader) Read(ctx context.Context, topic string, partition int32, offset int64) (*kgo.Record, error) {
	at := position{topic, partition, offset}
	switch {
	case topic == "":
		return nil, at.errorf("empty topic name")
	case partition < 0:
		return nil, at.errorf("negative partition %d", partition)
	case offset < 0:
		return nil, at.errorf("negative offset %d", offset)
	}
	part, err := r.fetch(ctx, at, partitionMaxBytes)
	if err != nil {
		return nil, err
	}
	fp, next := decode(at, part)
	for _, rec := range fp.Records {
		if rec.Offset == at.offset {
			return rec, nil
		}
	}
	if fp.Err != nil {
		return nil, at.errorf("decode fetched batch: %w", fp.Err)
	}
	if err := pastEnd(at, part); err != nil {
		return nil, err
	}
	if next > at.offset {
		// The decoder read past the offset, through batches covering it,
		// and found no data record there.
		return nil, at.errorf("%w", ErrNoRecord)
	}
	return nil, noBatch(at, part)
}

// decode decodes the data records of part from at.offset on, and returns
// them with the offset to fetch next.
func decode(at position, part *kmsg.FetchResponseTopicPartition) (kgo.FetchPartition, int64) {
	return kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{
		Offset:         at.offset,
		IsolationLevel: kgo.ReadCommitted(), // the decoder's half of isolation: drop aborted batches
		Topic:          at.topic,
		Partition:      at.partition,
	}, part, kgo.DefaultDecompressor(), nil)
}

// pastEnd returns an error wrapping ErrNotYet when at.offset is at or past
// what part says a read_committed reader may read, else nil.
func pastEnd(at position, part *kmsg.FetchResponseTopicPartition) error {
	switch {
	case at.offset >= part.HighWatermark:
		return at.errorf("%w (high watermark %d)", ErrNotYet, part.HighWatermark)
	case part.LastStableOffset >= 0 && at.offset >= part.LastStableOffset:
		return at.errorf("%w (in an open transaction: last stable offset %d, high watermark %d)", ErrNotYet, part.LastStableOffset, part.HighWatermark)
	}
	return nil
}

// noBatch is the error for a fetch below the end of the log that decoded
// no batch. A broker returns the whole first batch whatever the byte limit,
// so this is a broker bug, not something to retry.
func noBatch(at position, part *kmsg.FetchResponseTopicPartition) error {
	return at.errorf("the fetch returned %d bytes below the high watermark %d and no complete batch", len(part.RecordBatches), part.HighWatermark)
}

// fetch sends one Fetch of at.partition from at.offset, asking for
// maxBytes of it, and returns the partition's answer. It uses the cached
// metadata of at.topic and, when the fetch fails in a way fresh metadata
// may fix, asks for it and tries once more. A second failure is returned as
// it is; retrying more belongs to the caller, who knows how long the lookup
// may take. OFFSET_OUT_OF_RANGE is returned as an error wrapping ErrGone or
// ErrNotYet.
func (r *Reader) fetch(ctx context.Context, at position, maxBytes int32) (*kmsg.FetchResponseTopicPartition, error) {
	var part *kmsg.FetchResponseTopicPartition
	err := r.onLeader(ctx, at, func(tm *topicMeta, leader int32) (retry bool, err error) {
		part, retry, err = r.fetchFrom(ctx, at, tm, leader, maxBytes)
		return retry, err
	})
	return part, err
}

// onLeader calls do with the metadata of at.topic and the leader of
// at.partition, from the cache and, when do reports that fresh metadata may
// help, once more with metadata asked of the cluster now.
func (r *Reader) onLeader(ctx context.Context, at position, do func(tm *topicMeta, leader int32) (retry bool, err error)) error {
	retry, err := r.tryLeader(ctx, at, false, do)
	if retry && ctx.Err() == nil {
		_, err = r.tryLeader(ctx, at, true, do)
	}
	return err
}

// tryLeader is one attempt of onLeader. retry reports whether the failure
// may be due to stale metadata.
func (r *Reader) tryLeader(ctx context.Context, at position, fresh bool, do func(tm *topicMeta, leader int32) (retry bool, err error)) (retry bool, err error) {
	tm, err := r.topicMeta(ctx, at, fresh)
	if err != nil {
		return false, err
	}
	if int(at.partition) >= len(tm.leaders) {
		// Partitions may have been added since we cached the topic.
		return !fresh, at.errorf("topic %s has %d partitions", at.topic, len(tm.leaders))
	}
	leader := tm.leaders[at.partition]
	if leader < 0 {
		return true, at.errorf("partition has no leader")
	}
	return do(tm, leader)
}

// fetchFrom sends one Fetch to leader. retry reports whether the failure
// may be due to stale metadata, so that fresh metadata may help.
func (r *Reader) fetchFrom(ctx context.Context, at position, tm *topicMeta, leader, maxBytes int32) (part *kmsg.FetchResponseTopicPartition, retry bool, err error) {
	req := kmsg.NewPtrFetchRequest() // ReplicaID -1 (a consumer), no fetch session (SessionEpoch -1)
	req.MaxWaitMillis = 0            // answer at once: we want what is there, not to wait for more
	req.MinBytes = 1                 // MaxBytes keeps its default: see partitionMaxBytes
	req.IsolationLevel = isolation
	// We set both the name and the ID: franz-go negotiates the highest
	// version both sides support, and a version encodes only one of them:
	// the name below v13, the ID from v13 on (Kafka 3.1+). kfake and
	// Kafka 4.4 both negotiate v18. We cannot cap the version instead:
	// the client overwrites the request's version with the negotiated one,
	// and Kafka may drop the name-based versions some day. The ID also guards
	// against reading a topic deleted and recreated under the same name
	// since we cached it: the broker answers UNKNOWN_TOPIC_ID, and we
	// refresh the metadata.
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = at.topic
	rt.TopicID = tm.id
	rp := kmsg.NewFetchRequestTopicPartition() // CurrentLeaderEpoch, LastFetchedEpoch and LogStartOffset -1
	rp.Partition = at.partition
	rp.FetchOffset = at.offset
	rp.PartitionMaxBytes = maxBytes
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)

	kresp, err := r.cl.Broker(int(leader)).RetriableRequest(ctx, req)
	if err != nil {
		// The leader may have gone: fresh metadata names the new one.
		return nil, ctx.Err() == nil, at.errorf("fetch from broker %d: %w", leader, err)
	}
	resp := kresp.(*kmsg.FetchResponse)
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return nil, false, at.errorf("fetch from broker %d (v%d): %w", leader, resp.Version, err)
	}
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 || resp.Topics[0].Partitions[0].Partition != at.partition {
		return nil, false, at.errorf("fetch from broker %d (v%d): the response is not for the one partition asked", leader, resp.Version)
	}
	part = &resp.Topics[0].Partitions[0]

	switch perr := kerr.ErrorForCode(part.ErrorCode); {
	case perr == nil:
		return part, false, nil
	case errors.Is(perr, kerr.OffsetOutOfRange):
		return nil, false, r.outOfRange(ctx, at, leader, part)
	case kerr.IsRetriable(perr):
		// NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION,
		// UNKNOWN_TOPIC_ID, INCONSISTENT_TOPIC_ID and the like: our
		// view of the topic is out of date.
		return nil, true, at.errorf("fetch from broker %d: %w", leader, perr)
	default:
		return nil, false, at.errorf("fetch from broker %d: %w", leader, perr)
	}
}

// outOfRange tells ErrGone from ErrNotYet after the leader answered
// OFFSET_OUT_OF_RANGE, which it does for an offset below the log start
// offset or past the log end offset.
//
// kfake fills in the partition's log start offset and high watermark with the
// error; Kafka sends -1 for both. Without them we ask the leader for the log
// start offset: an offset below it is gone, any other is past the end. The
// log start offset only grows and never passes the high watermark, so a
// later answer cannot turn an offset that was past the end into one that is
// gone.
func (r *Reader) outOfRange(ctx context.Context, at position, leader int32, part *kmsg.FetchResponseTopicPartition) error {
	start := part.LogStartOffset
	if start < 0 {
		var err error
		if start, err = r.listOffset(ctx, at, leader, -2); err != nil {
			return at.errorf("%w, and the log start offset to tell deleted from not yet written is unknown: %w", kerr.OffsetOutOfRange, err)
		}
	}
	if at.offset < start {
		return at.errorf("%w (log start offset %d)", ErrGone, start)
	}
	hw := part.HighWatermark
	if hw < 0 {
		var err error
		if hw, err = r.listOffset(ctx, at, leader, -1); err != nil {
			return at.errorf("%w (offset out of range and not below the log start offset %d)", ErrNotYet, start)
		}
	}
	return at.errorf("%w (high watermark %d)", ErrNotYet, hw)
}

// listOffset asks the leader for the partition's log start offset
// (timestamp -2) or its end offset (-1) at our isolation level.
func (r *Reader) listOffset(ctx context.Context, at position, leader int32, timestamp int64) (int64, error) {
	req := kmsg.NewPtrListOffsetsRequest() // ReplicaID -1
	req.IsolationLevel = isolation
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = at.topic
	rp := kmsg.NewListOffsetsRequestTopicPartition() // CurrentLeaderEpoch -1
	rp.Partition = at.partition
	rp.Timestamp = timestamp
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	kresp, err := r.cl.Broker(int(leader)).RetriableRequest(ctx, req)
	if err != nil {
		return -1, err
	}
	resp := kresp.(*kmsg.ListOffsetsResponse)
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		return -1, fmt.Errorf("list offsets of broker %d: the response is not for the one partition asked", leader)
	}
	p := resp.Topics[0].Partitions[0]
	if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
		return -1, fmt.Errorf("list offsets of broker %d: %w", leader, err)
	}
	return p.Offset, nil
}

// topicMeta returns what a fetch needs to know about at.topic: from the
// cache, unless fresh or not cached yet, else from a metadata request.
//
// We send the metadata request ourselves rather than use kadm or
// cl.RequestCachedMetadata: those set AllowAutoTopicCreation from cl's
// options, and a read must never create a topic. Sending it through
// cl.Request still updates cl's own view of the brokers, so the leader we
// find is one cl can reach.
func (r *Reader) topicMeta(ctx context.Context, at position, fresh bool) (*topicMeta, error) {
	if !fresh {
		r.mu.RLock()
		tm := r.topics[at.topic]
		r.mu.RUnlock()
		if tm != nil {
			return tm, nil
		}
	}

	req := kmsg.NewPtrMetadataRequest()
	req.AllowAutoTopicCreation = false
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(at.topic)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, r.cl)
	if err != nil {
		return nil, at.errorf("metadata of topic %s: %w", at.topic, err)
	}
	var mt *kmsg.MetadataResponseTopic
	for i := range resp.Topics {
		if t := &resp.Topics[i]; t.Topic != nil && *t.Topic == at.topic {
			mt = t
		}
	}
	if mt == nil {
		return nil, at.errorf("metadata of topic %s: the response does not list the topic", at.topic)
	}
	if err := kerr.ErrorForCode(mt.ErrorCode); err != nil {
		if errors.Is(err, kerr.UnknownTopicOrPartition) {
			r.mu.Lock()
			delete(r.topics, at.topic)
			r.mu.Unlock()
		}
		return nil, at.errorf("metadata of topic %s: %w", at.topic, err)
	}

	tm := &topicMeta{id: mt.TopicID}
	for _, p := range mt.Partitions {
		if p.Partition < 0 {
			continue
		}
		for int(p.Partition) >= len(tm.leaders) {
			tm.leaders = append(tm.leaders, -1)
		}
		// REPLICA_NOT_AVAILABLE is about a follower: the leader
		// still leads. Any other error leaves the partition without
		// a leader we can use.
		if perr := kerr.ErrorForCode(p.ErrorCode); perr == nil || errors.Is(perr, kerr.ReplicaNotAvailable) {
			tm.leaders[p.Partition] = p.Leader
		}
	}
	r.mu.Lock()
	r.topics[at.topic] = tm
	r.mu.Unlock()
	return tm, nil
}
