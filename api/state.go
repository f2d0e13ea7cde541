package api

import (
	"context"
	"time"

	"github.com/pdrouter/pdrouter/decider"
	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
	"github.com/pdrouter/pdrouter/events/logread"
)

// Offsets is an `after` vector: logical topic → partition → the offset of a
// record that must be applied (as the ingest endpoints return them).
type Offsets map[events.Topic]map[int32]int64

// State is the replica's materialized state, as the API reads it. The
// statestore implements it; the API never writes state except by counting
// its own decisions (RecordLocalDecision), which the state then recognizes
// and ignores when they come back from the log.
type State interface {
	// Read calls fn with a consistent view of the state and the offset
	// vector (watermark) that view reflects. fn must not retain v.
	Read(fn func(v decider.View, watermark *pb.Watermark))
	// WaitApplied blocks until the state has applied the records at the
	// given offsets (and everything before them), or ctx ends.
	WaitApplied(ctx context.Context, after Offsets) error
	// RecordLocalDecision counts a decision this replica made, at once.
	RecordLocalDecision(rec *pb.DecisionRecord)
	// Decision returns a decision by decision id: the whole record while the
	// replica holds it in memory, else its header and its position on the
	// decisions topic (Server.wholeDecision reads the rest from there).
	Decision(id string) (StoredDecision, bool)
	// DecisionForRequest returns the decision made for a request id, as
	// Decision does.
	DecisionForRequest(requestID string) (StoredDecision, bool)
	// DecisionRefForRequest names the decision DecisionForRequest returns
	// and its workers, without reading the record: all a lifecycle event
	// needs, at the cost of an index lookup however old the decision.
	DecisionRefForRequest(requestID string) (DecisionRef, bool)
	// Workers lists every registered worker with its status.
	Workers() []WorkerStatus
	// Registered reports whether worker id is registered in this state,
	// and its dp_size (0 when the registration gives none): what HTTP ingest
	// checks on every call, without listing the fleet.
	Registered(id string) (dpSize uint32, ok bool)
	// Status reports offsets, lag and the state digest. The digest reads
	// the whole store: this is for tools, not probes.
	Status(ctx context.Context) (StateStatus, error)
	// Cell is the share of the log the state holds (events.Cell; the
	// zero value is the whole log). The API refuses what it would write
	// into, or wait for on, another cell's partitions (cell.go).
	Cell() events.Cell
	// Applies reports whether the state applies records of topic t: a
	// wait skips the topics it does not, and so does the cell's check of
	// an `after` vector.
	Applies(t events.Topic) bool
	// TotalLag is the records the state is behind the log, for /readyz.
	TotalLag(ctx context.Context) (int64, error)
}

// The optional capabilities of a State: New looks for them on Deps.State
// once, and the route handler uses those present. StoreState has both.
// Without them a decision is still counted, by RecordLocalDecision, but the
// state decodes the decision's log copy again when it comes back and must
// look up whether it applied it already.

// DecisionExpecter is a State that can be told of a decision before its
// append: when the log copy is applied before the decision is recorded, it
// is then recognized by its bytes, not decoded again. Recording the
// decision ends the announcement; a failed append ends it with
// UnexpectLocalDecision.
type DecisionExpecter interface {
	ExpectLocalDecision(rec *pb.DecisionRecord, value []byte)
	UnexpectLocalDecision(id string)
}

// PositionedDecisionRecorder is a State that records a local decision
// knowing where its log copy, value, landed, and its load delta (delta's
// Offset is -1 when none was written): it then knows from its applied
// offsets whether the copy, or the delta, was applied already, without a
// read. The route handler calls it instead of RecordLocalDecision.
type PositionedDecisionRecorder interface {
	RecordLocalDecisionAt(rec *pb.DecisionRecord, value []byte, at, delta Position)
}

// StoredDecision is a decision as the state holds it.
type StoredDecision struct {
	// Record is the decision record, shared and read-only. Unless Complete
	// it is the header only: no candidate table, and hash chains only in
	// approximate mode.
	Record *pb.DecisionRecord
	// Complete: Record is the whole record.
	Complete bool
	// Partition and Offset are the whole record's position on the decisions
	// topic (Partition -1 when unknown; a Complete record needs none).
	Partition int32
	Offset    int64
}

// DecisionReader reads whole decision records from the decisions topic: a
// replica keeps only the header of a decision once it is committed
// (statestore/decisions.go says why), with the record's position when it
// knows it.
type DecisionReader interface {
	// ReadDecision returns the decision record at (partition, offset) of
	// the decisions topic. It returns an error wrapping ErrRecordGone when
	// the topic no longer holds that offset, and one wrapping
	// ErrNotTheRecord when what it holds is not a decision record.
	ReadDecision(ctx context.Context, partition int32, offset int64) (*pb.DecisionRecord, error)
	// FindDecision returns the record of decision id, whose position is
	// unknown, from the decisions partition its decode worker's key picks,
	// near its decided_at (the record's timestamp). It returns an error
	// wrapping ErrRecordGone when the topic no longer holds the records
	// of that time, ErrRecordNotFound when they do not include it, and
	// ErrSearchLimit when the search reached its bounds first.
	FindDecision(ctx context.Context, id, decodeWorker string, decidedAt time.Time) (*pb.DecisionRecord, error)
	// SearchDecision returns the record of decision id, which the state
	// does not hold, from whichever partition of the decisions topic holds
	// it near at (the time in its id), each partition searched within lim.
	// Its errors wrap ErrSearchLimit, ErrRecordGone or ErrRecordNotFound
	// as FindDecision's do. scanned is the records it read, whatever the
	// answer.
	SearchDecision(ctx context.Context, id string, at time.Time, lim logread.ScanLimits) (rec *pb.DecisionRecord, scanned int, err error)
	// Retention is how long the decisions topic keeps a record (its
	// retention.ms), 0 for no time bound: a decision older than that is
	// not searched for.
	Retention(ctx context.Context) (time.Duration, error)
}

// DecisionRef names a decision and the workers it chose.
type DecisionRef struct {
	DecisionID    string
	DecodeWorker  *pb.WorkerRef
	PrefillWorker *pb.WorkerRef // nil for a local prefill
}

// WorkerStatus is one row of GET /v1/workers.
type WorkerStatus struct {
	WorkerID            string `json:"worker_id"`
	DPRank              uint32 `json:"dp_rank"`
	Pool                string `json:"pool"`
	Model               string `json:"model"`
	BlockSize           int    `json:"block_size"`
	TotalKVBlocks       *int64 `json:"total_kv_blocks"`
	MaxNumBatchedTokens *int64 `json:"max_num_batched_tokens"`
	KVEventsEndpoint    string `json:"kv_events_endpoint,omitempty"`
	MetricsURL          string `json:"metrics_url,omitempty"`
	HTTPURL             string `json:"http_url,omitempty"`
	CachedBlocks        int64  `json:"cached_blocks"`
	ActiveDecodeBlocks  int64  `json:"active_decode_blocks"`
	ActivePrefillTokens int64  `json:"active_prefill_tokens"`
	// Load is the latest load sample, nil when none arrived.
	Load *WorkerLoad `json:"load"`
	// KVEventsMissing is true for a decode worker that sends load samples but
	// no KV events: its cached ratio is always 1.0, so it never bypasses.
	KVEventsMissing bool   `json:"kv_events_missing"`
	KVEventsNote    string `json:"kv_events_note,omitempty"`
	// KVEventsBlockSize is the block_size of the worker's latest BlockStored
	// event (0 before any). KVBlockSizeMismatch is true when it is not the
	// registered BlockSize: its overlap is then always 0, although
	// CachedBlocks counts its blocks. KVBlockSizeNote says why and the fix.
	KVEventsBlockSize   int    `json:"kv_events_block_size"`
	KVBlockSizeMismatch bool   `json:"kv_block_size_mismatch"`
	KVBlockSizeNote     string `json:"kv_block_size_note,omitempty"`
	// Health is the worker's health as the log says (its latest applied
	// WorkerHealth record); the decider excludes an unhealthy worker.
	Health WorkerHealth `json:"health"`
	// DPSize is the registered dp_size (0: not data-parallel), for the
	// ingest endpoints' rank check; not part of the answer.
	DPSize uint32 `json:"-"`
}

// WorkerHealth is a worker's health: healthy with no record, or what its
// latest applied WorkerHealth record says, and where that record sits on
// the load topic (the offset since which the worker has this health).
type WorkerHealth struct {
	Healthy bool `json:"healthy"`
	// Reason: scrape_failed, connect_refused, zmq_down or recovered; "" with
	// no record.
	Reason   string `json:"reason,omitempty"`
	Source   string `json:"source,omitempty"`
	Observer string `json:"observer,omitempty"`
	Detail   string `json:"detail,omitempty"`
	// ObservedAt is when the observer saw the change (its clock).
	ObservedAt *time.Time `json:"observed_at,omitempty"`
	// Since is the record's place: topic load, its partition and offset.
	Since *LogPosition `json:"since,omitempty"`
}

// LogPosition is a record's place on the log.
type LogPosition struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
}

// WorkerLoad is a worker's latest load sample and its age in event time.
type WorkerLoad struct {
	SampleTime          time.Time `json:"sample_time"`
	AgeSeconds          float64   `json:"age_seconds"`
	NumRequestsRunning  *uint64   `json:"num_requests_running,omitempty"`
	NumRequestsWaiting  *uint64   `json:"num_requests_waiting,omitempty"`
	KVUsedBlocks        *uint64   `json:"kv_used_blocks,omitempty"`
	KVTotalBlocks       *uint64   `json:"kv_total_blocks,omitempty"`
	ActivePrefillTokens *uint64   `json:"active_prefill_tokens,omitempty"`
}

// StateStatus is the body of GET /v1/state.
type StateStatus struct {
	// Cell is the share of the log the state holds, "i/n" ("0/1": the
	// whole log).
	Cell string `json:"cell"`
	// Applied is the offset vector the state reflects.
	Applied map[string]map[string]int64 `json:"applied"`
	// Lag per topic and partition: end offset minus applied.
	Lag      map[string]map[string]int64 `json:"lag"`
	TotalLag int64                       `json:"total_lag"`
	Digest   string                      `json:"digest"`
	Snapshot *SnapshotInfo               `json:"snapshot"`
}

// SnapshotInfo describes the newest local snapshot.
type SnapshotInfo struct {
	Path    string                      `json:"path"`
	Offsets map[string]map[string]int64 `json:"offsets"`
}
