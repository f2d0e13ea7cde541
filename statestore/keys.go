package statestore

import (
	"encoding/binary"
	"errors"

	"github.com/pdrouter/pdrouter/events"
)

// Key layout of the Pebble store (schema migrations.StoreSchemaVersion = 7).
// History (migrations/store.go): v2 added the families h, d, q and e; v3
// the parent's router hash in prefix values; v4 the workers in request
// index values; v5 stores a decision's header and position instead of the
// whole record; v6 an active entry's chain length and decision position
// instead of its chain (chains.go); v7 the family u (workerhealth.go), which
// a v6 store upgrades to as it is. Older stores are rebuilt.
//
// Every key starts with a one-byte family. Worker ids are validated by
// events.ValidateWorkerID (printable, no NUL), so a NUL after an id ends it
// unambiguously and "id\x00" .. "id\x01" spans exactly that worker's ranks.
// Integers are big-endian in keys (so they sort numerically) and
// little-endian in values.
//
//	'm' name                                 meta: "schema" → u32 version,
//	                                         "now" → i64 max event time (all topics),
//	                                         "reqnow" → i64 max event time (decisions, outcomes),
//	                                         "shares" → the writer id of a store of load shares
//	'o' topic 0x00 partition(u32)            next offset to read, i64
//	'w' workerID                             WorkerRegistration, deterministic protobuf
//	't' workerID                             Kafka timestamp (ms) of the worker's latest tombstone, i64
//	'l' workerID 0x00 rank(u32)              LoadSample, deterministic protobuf (the latest)
//	'p' workerID 0x00 rank(u32) engine(u64)  prefix entry: router hash u64 + flags u8
//	                                         (bits 0..2: tiers device/host/disk held; bit 7: orphan)
//	                                         + parent's router hash u64 (the router hash itself
//	                                         for a chain's first block; absent for an orphan)
//	'a' entryID                              active-request facts, the chain by length and
//	                                         position only (active.go encodeEntry, chains.go)
//	'h' workerID 0x00 rank(u32)              KV-event health: i64 first load sample time,
//	                                         i64 latest kv-events time (kvhealth.go); absent when both 0
//	'u' workerID                             the worker's latest WorkerHealth record: u8 format 1 |
//	                                         uvarint partition | uvarint offset (its place on the
//	                                         load topic) | the record, deterministic protobuf
//	                                         (workerhealth.go)
//	'd' decisionID                           u8 format 1 | uvarint partition | uvarint offset (the
//	                                         record's position on the decisions topic) | the
//	                                         record's header, deterministic protobuf
//	                                         (decisions.go appendStoredDecision)
//	'q' uvarint(len) requestID decisionID    request index: i64 decided_at, then the decision's
//	                                         workers (decisions.go requestIndexValue)
//	'e' decidedAt(u64, sign bit flipped) decisionID
//	                                         retention index: the request id
//	'y' 'e' decisionID                       latency model join entry (latmodel.AppendEntry)
//	'y' 's'                                  latency model sums, the model bytes (latmodel.AppendSums;
//	                                         derived from the entries again on open)
//
// Decision and request ids are free-form strings (they may hold NUL), so
// the request index length-prefixes the request id: the keys of one
// request are contiguous and sorted by decision id, the first being the
// canonical decision (DecisionForRequest).
//
// Nothing else is stored: the hot index (router hash → holders), the slot
// numbers, the active aggregates, the duplicate counts and the predicted
// entries of approximate mode (approx.go, derived from the 'd' records) are
// all derived from these keys when the store opens, so they can never
// disagree with it. The hash chains of active requests are read back from
// the decisions topic at the positions their 'a' entries name (chains.go).
// Because keys hold worker ids and not slots, and values are canonical,
// equal states have byte-identical keyspaces; the digest hashes that.
const (
	famMeta     = 'm'
	famOffset   = 'o'
	famRegistry = 'w'
	famLoad     = 'l'
	famPrefix   = 'p'
	famActive   = 'a'
	famTomb     = 't'
	famHealth   = 'h'
	famWorkerUp = 'u'
	famDecision = 'd'
	famRequest  = 'q'
	famExpiry   = 'e'
	famLatency  = 'y'
)

var (
	keySchema = []byte("mschema")
	keyNow    = []byte("mnow")
	keyReqNow = []byte("mreqnow")
	// keySharesWriter: with SourceLoadShares, the ReplicaID the store was
	// built for (store.go checkWriterMarker).
	keySharesWriter = []byte("mshares")
)

// workerRankKey is the key body of one (worker, rank): id 0x00 rank.
func workerRankKey(dst []byte, fam byte, id string, rank uint32) []byte {
	dst = append(dst, fam)
	dst = append(dst, id...)
	dst = append(dst, 0)
	return binary.BigEndian.AppendUint32(dst, rank)
}

// workerSpan returns [lo, hi) covering every rank of worker id in family fam.
func workerSpan(fam byte, id string) (lo, hi []byte) {
	lo = append(append([]byte{fam}, id...), 0)
	hi = append(append([]byte{fam}, id...), 1)
	return lo, hi
}

func prefixKey(dst []byte, wk []byte, engine uint64) []byte {
	dst = append(dst, wk...)
	return binary.BigEndian.AppendUint64(dst, engine)
}

func offsetKey(t events.Topic, partition int32) []byte {
	k := append([]byte{famOffset}, t...)
	k = append(k, 0)
	return binary.BigEndian.AppendUint32(k, uint32(partition))
}

func registryKey(id string) []byte { return append([]byte{famRegistry}, id...) }

func tombKey(id string) []byte { return append([]byte{famTomb}, id...) }

func healthKey(id string) []byte { return append([]byte{famWorkerUp}, id...) }

func activeKey(id string) []byte { return append([]byte{famActive}, id...) }

func decisionKey(id string) []byte { return append([]byte{famDecision}, id...) }

// requestPrefix is the span of one request's index keys: every key of
// request id starts with it, and no key of another request does (the
// length prefix).
func requestPrefix(requestID string) []byte {
	k := binary.AppendUvarint([]byte{famRequest}, uint64(len(requestID)))
	return append(k, requestID...)
}

func requestKey(requestID, decisionID string) []byte {
	return append(requestPrefix(requestID), decisionID...)
}

// expiryKey orders decisions by event time; the sign bit is flipped so
// that negative times (never produced, but valid) sort first.
func expiryKey(decidedAt int64, decisionID string) []byte {
	k := binary.BigEndian.AppendUint64([]byte{famExpiry}, uint64(decidedAt)^(1<<63))
	return append(k, decisionID...)
}

func parseExpiryKey(k []byte) (decidedAt int64, decisionID string, err error) {
	if len(k) < 9 || k[0] != famExpiry {
		return 0, "", errBadKey
	}
	return int64(binary.BigEndian.Uint64(k[1:9]) ^ (1 << 63)), string(k[9:]), nil
}

var errBadKey = errors.New("statestore: malformed key")

// parseWorkerRank splits a key body "id 0x00 rank(u32) rest".
func parseWorkerRank(body []byte) (id string, rank uint32, rest []byte, err error) {
	for i, c := range body {
		if c == 0 {
			if len(body) < i+5 {
				return "", 0, nil, errBadKey
			}
			return string(body[:i]), binary.BigEndian.Uint32(body[i+1 : i+5]), body[i+5:], nil
		}
	}
	return "", 0, nil, errBadKey
}

func parseOffsetKey(body []byte) (events.Topic, int32, error) {
	for i, c := range body {
		if c == 0 && len(body) == i+5 {
			t, err := events.ParseTopic(string(body[:i]))
			if err != nil {
				return "", 0, err
			}
			return t, int32(binary.BigEndian.Uint32(body[i+1:])), nil
		}
	}
	return "", 0, errBadKey
}

// Prefix entry value: router hash (LE u64) and a flag byte.
const (
	flagOrphan = 0x80
	tierMask   = 0x07
)

func prefixValue(dst []byte, router, up uint64, flags uint8) []byte {
	dst = binary.LittleEndian.AppendUint64(dst, router)
	dst = append(dst, flags)
	if flags&flagOrphan != 0 {
		return dst
	}
	return binary.LittleEndian.AppendUint64(dst, up)
}

func i64Value(v int64) []byte { return binary.LittleEndian.AppendUint64(nil, uint64(v)) }
