package api

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"google.golang.org/protobuf/proto"

	"github.com/pdrouter/pdrouter/api/registration"
	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
	"github.com/pdrouter/pdrouter/internal/rejects"
	"github.com/pdrouter/pdrouter/internal/textcut"
)

// engineHash is an engine's block hash in JSON: engines hash with uint64,
// signed int64 (negative values) or bytes, so a number of either sign, or a
// string (decimal, or 0x hex) is accepted and normalized to 64 bits.
type engineHash uint64

func (h *engineHash) UnmarshalJSON(b []byte) error {
	s := string(b)
	if unq, err := strconv.Unquote(s); err == nil {
		s = unq
	}
	if rest, ok := strings.CutPrefix(s, "0x"); ok {
		v, err := strconv.ParseUint(rest, 16, 64)
		if err != nil {
			return &fieldError{field: "block_hashes", msg: fmt.Sprintf("%s is not 64-bit hex", b)}
		}
		*h = engineHash(v)
		return nil
	}
	if v, err := strconv.ParseUint(s, 10, 64); err == nil {
		*h = engineHash(v)
		return nil
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return &fieldError{field: "block_hashes", msg: fmt.Sprintf("%s is not a 64-bit integer hash", b)}
	}
	*h = engineHash(uint64(v))
	return nil
}

type kvEventJSON struct {
	Type            string       `json:"type"`
	BlockHashes     []engineHash `json:"block_hashes"`
	ParentBlockHash *engineHash  `json:"parent_block_hash"`
	TokenIDs        []uint32     `json:"token_ids"`
	BlockSize       uint32       `json:"block_size"`
	Medium          *string      `json:"medium"`
	LoraName        *string      `json:"lora_name"`
}

type kvBody struct {
	WorkerID string        `json:"worker_id"`
	DPRank   uint32        `json:"dp_rank"`
	TS       *float64      `json:"ts"`
	Events   []kvEventJSON `json:"events"`
}

// decodeWorkerBody decodes a worker-keyed ingest body into dst and checks
// its worker_id (workerID points into dst): the first steps of every such
// call. On failure it has answered, and ok is false. raw is the body.
func (s *Server) decodeWorkerBody(c *gin.Context, dst any, workerID *string) (raw []byte, ok bool) {
	raw, err := decodeBody(c, s.cfg.bodyLimit, dst)
	if err != nil {
		fail(c, err)
		return nil, false
	}
	if err := events.ValidateWorkerID(*workerID); err != nil {
		fail(c, unprocessable("invalid_value", "worker_id", err.Error()))
		return nil, false
	}
	return raw, true
}

// checkRank refuses events that no replica would keep: for a worker id
// this replica has no registration of, and with a dp_rank beyond
// events.MaxDPSize or beyond the dp_size of the worker's registration.
// Checked before anything is written, so the engine hears of its mistake
// instead of the log filling with records every replica skips or budgets.
// A registration made on another replica a moment ago may not have reached
// this one yet: the answer says so, and a retry succeeds once it has.
func (s *Server) checkRank(ctx context.Context, id string, rank uint32) error {
	if err := events.ValidateDPRank(rank); err != nil {
		return unprocessable("invalid_value", "dp_rank", err.Error())
	}
	if err := s.checkKeyCell(events.WorkerKey(id)); err != nil {
		return err // not unknown_worker: another cell's replicas know it
	}
	dpSize, ok := s.registered(ctx, id)
	if !ok {
		return unprocessable("unknown_worker", "worker_id", fmt.Sprintf(
			"worker %s is not registered on this replica: register it first (POST /v1/workers); a registration made elsewhere just now reaches this replica within its lag", textcut.Truncate(id, 64)))
	}
	if n := max(dpSize, 1); rank >= n {
		return unprocessable("invalid_value", "dp_rank", fmt.Sprintf("dp_rank %d: worker %s is registered with %d rank(s)", rank, id, n))
	}
	return nil
}

// maxIngestEvents bounds the events of one HTTP ingest call.
const maxIngestEvents = 10000

func (s *Server) ingestKV(c *gin.Context) {
	var body kvBody
	raw, ok := s.decodeWorkerBody(c, &body, &body.WorkerID)
	if !ok {
		return
	}
	if len(body.Events) == 0 || len(body.Events) > maxIngestEvents {
		fail(c, unprocessable("invalid_value", "events", fmt.Sprintf("%d events; send 1 to %d", len(body.Events), maxIngestEvents)))
		return
	}
	ts, err := s.eventTime(body.TS, "ts")
	if err != nil {
		fail(c, err)
		return
	}
	rec := &pb.KvEventRecord{
		Worker:            &pb.WorkerRef{WorkerId: body.WorkerID, DpRank: body.DPRank},
		EventTimeUnixNano: ts,
		Source:            &pb.KvSource{Engine: pb.Engine_ENGINE_HTTP, IngestId: s.cfg.replicaID},
		Raw:               &pb.RawPayload{Format: pb.RawFormat_RAW_FORMAT_HTTP_JSON, Payload: raw},
	}
	for i, e := range body.Events {
		ev, err := kvEvent(e, fmt.Sprintf("events[%d]", i))
		if err != nil {
			fail(c, err)
			return
		}
		rec.Events = append(rec.Events, ev)
	}
	// Last: the body is checked first, so a caller fixing its events
	// hears of every mistake, not only of the registration.
	if err := s.checkRank(c.Request.Context(), body.WorkerID, body.DPRank); err != nil {
		fail(c, err)
		return
	}
	s.appendAndAnswer(c, events.WorkerKey(body.WorkerID), rec)
}

func kvEvent(e kvEventJSON, path string) (*pb.KvEvent, error) {
	medium := ""
	if e.Medium != nil {
		medium = *e.Medium
	}
	hashes := func() []uint64 {
		out := make([]uint64, len(e.BlockHashes))
		for i, h := range e.BlockHashes {
			out[i] = uint64(h)
		}
		return out
	}
	switch e.Type {
	case "stored":
		if len(e.BlockHashes) == 0 {
			return nil, unprocessable("invalid_value", path+".block_hashes", "a stored event needs at least one block hash")
		}
		if e.BlockSize == 0 || e.BlockSize > events.MaxBlockSize {
			return nil, unprocessable("invalid_value", path+".block_size", fmt.Sprintf("must be in [1, %d]", events.MaxBlockSize))
		}
		if want := len(e.BlockHashes) * int(e.BlockSize); len(e.TokenIDs) != want {
			return nil, unprocessable("invalid_value", path+".token_ids", fmt.Sprintf("has %d token ids; %d blocks of %d need %d", len(e.TokenIDs), len(e.BlockHashes), e.BlockSize, want))
		}
		st := &pb.BlockStored{BlockHashes: hashes(), TokenIds: e.TokenIDs, BlockSize: e.BlockSize, Tier: events.TierOf(medium), Medium: medium}
		if e.ParentBlockHash != nil {
			p := uint64(*e.ParentBlockHash)
			st.ParentBlockHash = &p
		}
		if e.LoraName != nil {
			st.LoraName = *e.LoraName
		}
		return &pb.KvEvent{Event: &pb.KvEvent_Stored{Stored: st}}, nil
	case "removed":
		if len(e.BlockHashes) == 0 {
			return nil, unprocessable("invalid_value", path+".block_hashes", "a removed event needs at least one block hash")
		}
		return &pb.KvEvent{Event: &pb.KvEvent_Removed{Removed: &pb.BlockRemoved{BlockHashes: hashes(), Tier: events.TierOf(medium), Medium: medium}}}, nil
	case "cleared":
		return &pb.KvEvent{Event: &pb.KvEvent_Cleared{Cleared: &pb.AllBlocksCleared{}}}, nil
	}
	return nil, unprocessable("invalid_value", path+".type", fmt.Sprintf("%q; want stored, removed or cleared", e.Type))
}

type loadBody struct {
	WorkerID            string   `json:"worker_id"`
	DPRank              uint32   `json:"dp_rank"`
	TS                  *float64 `json:"ts"`
	NumRequestsRunning  *uint64  `json:"num_requests_running"`
	NumRequestsWaiting  *uint64  `json:"num_requests_waiting"`
	KVUsedBlocks        *uint64  `json:"kv_used_blocks"`
	KVTotalBlocks       *uint64  `json:"kv_total_blocks"`
	ActivePrefillTokens *uint64  `json:"active_prefill_tokens"`
	KVUsageRatio        *float64 `json:"kv_usage_ratio"`
}

func (s *Server) ingestLoad(c *gin.Context) {
	var b loadBody
	if _, ok := s.decodeWorkerBody(c, &b, &b.WorkerID); !ok {
		return
	}
	if b.KVUsageRatio != nil && !(*b.KVUsageRatio >= 0 && *b.KVUsageRatio <= 1) {
		fail(c, unprocessable("invalid_value", "kv_usage_ratio", "must be in [0, 1]"))
		return
	}
	ts, err := s.eventTime(b.TS, "ts")
	if err != nil {
		fail(c, err)
		return
	}
	rec := &pb.LoadSample{
		Worker: &pb.WorkerRef{WorkerId: b.WorkerID, DpRank: b.DPRank}, SampleTimeUnixNano: ts,
		NumRequestsRunning: b.NumRequestsRunning, NumRequestsWaiting: b.NumRequestsWaiting,
		KvUsedBlocks: b.KVUsedBlocks, KvTotalBlocks: b.KVTotalBlocks, ActivePrefillTokens: b.ActivePrefillTokens,
		KvUsageRatio: b.KVUsageRatio, Origin: "http",
	}
	if err := s.checkRank(c.Request.Context(), b.WorkerID, b.DPRank); err != nil {
		fail(c, err)
		return
	}
	s.appendAndAnswer(c, events.WorkerKey(b.WorkerID), rec)
}

var engines = map[string]pb.Engine{"": pb.Engine_ENGINE_UNSPECIFIED, "vllm": pb.Engine_ENGINE_VLLM,
	"sglang": pb.Engine_ENGINE_SGLANG, "trtllm": pb.Engine_ENGINE_TRTLLM, "sim": pb.Engine_ENGINE_SIM}

func (s *Server) registerWorker(c *gin.Context) {
	var b registration.Request
	if _, ok := s.decodeWorkerBody(c, &b, &b.WorkerID); !ok {
		return
	}
	pool := map[string]pb.Pool{registration.PoolPrefill: pb.Pool_POOL_PREFILL, registration.PoolDecode: pb.Pool_POOL_DECODE}[b.Pool]
	if pool == pb.Pool_POOL_UNSPECIFIED {
		fail(c, unprocessable("invalid_value", "pool", fmt.Sprintf("%q; want prefill or decode", b.Pool)))
		return
	}
	if b.Model == "" || len(b.Model) > 512 {
		fail(c, unprocessable("invalid_value", "model", "a model name of 1 to 512 bytes is required"))
		return
	}
	if b.BlockSize == 0 || b.BlockSize > events.MaxBlockSize {
		fail(c, unprocessable("invalid_value", "block_size", fmt.Sprintf("must be in [1, %d]", events.MaxBlockSize)))
		return
	}
	eng, ok := engines[strings.ToLower(b.Engine)]
	if !ok {
		fail(c, unprocessable("invalid_value", "engine", fmt.Sprintf("%q; want vllm, sglang, trtllm or sim", b.Engine)))
		return
	}
	if err := checkZMQEndpoint("kv_events_endpoint", b.KVEventsEndpoint); err != nil {
		fail(c, err)
		return
	}
	if err := checkZMQEndpoint("kv_replay_endpoint", b.KVReplayEndpoint); err != nil {
		fail(c, err)
		return
	}
	if b.MetricsURL != "" && !strings.HasPrefix(b.MetricsURL, "http://") && !strings.HasPrefix(b.MetricsURL, "https://") {
		fail(c, unprocessable("invalid_value", "metrics_url", fmt.Sprintf("%q is not an http(s) URL", b.MetricsURL)))
		return
	}
	if err := checkHTTPURL("http_url", b.HTTPURL); err != nil {
		fail(c, err)
		return
	}
	rec := &pb.WorkerRegistration{
		WorkerId: b.WorkerID, Pool: pool, Model: b.Model, BlockSize: b.BlockSize,
		TotalKvBlocks: b.TotalKVBlocks, MaxNumBatchedTokens: b.MaxNumBatchedTokens,
		KvEventsEndpoint: b.KVEventsEndpoint, KvReplayEndpoint: b.KVReplayEndpoint, KvEventsTopic: b.KVEventsTopic,
		MetricsUrl: b.MetricsURL, DpSize: b.DPSize, Engine: eng, RegisteredAtUnixNano: s.cfg.now().UnixNano(),
		HttpUrl: b.HTTPURL,
	}
	// The bounds every replica applies (dp_size, lengths of every string):
	// answered with the field at fault.
	if err := events.Validate(rec); err != nil {
		fail(c, validationError(err))
		return
	}
	// Before the cap: the cap counts this cell's workers, and another
	// cell's worker is misdirected, not one too many.
	if err := s.checkKeyCell(events.WorkerKey(b.WorkerID)); err != nil {
		fail(c, err)
		return
	}
	if err := s.checkWorkerCap(b.WorkerID); err != nil {
		fail(c, err)
		return
	}
	s.appendAndAnswer(c, events.WorkerKey(b.WorkerID), rec)
}

// checkWorkerCap refuses a registration of a new worker id when the
// registry this replica sees holds the cap already: every replica would
// skip it on apply (statestore.Options.MaxWorkers). Re-registrations of a
// known id always pass. Two registrations racing through two replicas may
// both pass here; the apply rule then keeps the cap, deterministically.
func (s *Server) checkWorkerCap(id string) error {
	ids := map[string]struct{}{}
	for _, w := range s.deps.State.Workers() {
		if w.WorkerID == id {
			return nil
		}
		ids[w.WorkerID] = struct{}{}
	}
	if len(ids) < s.cfg.maxWorkers {
		return nil
	}
	rejects.For(s.cfg.registerer).Inc(rejects.Registration, reasonTooManyWorkers)
	return unprocessable(reasonTooManyWorkers, "worker_id", fmt.Sprintf("%d workers are registered, the cap (--max-workers); deregister one first", len(ids)))
}

// reasonTooManyWorkers is the error code and the rejected_total reason of
// a registration past the worker cap.
const reasonTooManyWorkers = "too_many_workers"

// validationError turns an events.Validate failure into a 422 naming the
// JSON field at fault.
func validationError(err error) error {
	var ve *events.ValidationError
	if errors.As(err, &ve) && ve.Field != "" {
		return unprocessable("invalid_value", ve.Field, err.Error())
	}
	return unprocessable("invalid_value", "", err.Error())
}

func (s *Server) deregisterWorker(c *gin.Context) {
	id := c.Param("id")
	if err := events.ValidateWorkerID(id); err != nil {
		fail(c, unprocessable("invalid_value", "worker_id", err.Error()))
		return
	}
	if err := s.checkKeyCell(events.WorkerKey(id)); err != nil {
		fail(c, err)
		return
	}
	known := false
	for _, w := range s.deps.State.Workers() {
		known = known || w.WorkerID == id
	}
	if !known {
		fail(c, notFound("unknown_worker", "no registered worker "+id))
		return
	}
	s.appendRecords(c, events.NewTombstone(s.deps.Names, id))
}

// eventTime converts an engine timestamp (float seconds) to Unix
// nanoseconds; absent means "now" (the receipt time). A time further
// ahead of this process's clock than events.MaxEventSkew is refused: the
// record's log time is this clock, and every replica would skip it.
func (s *Server) eventTime(ts *float64, field string) (int64, error) {
	now := s.cfg.now()
	if ts == nil {
		return now.UnixNano(), nil
	}
	if math.IsNaN(*ts) || *ts < 0 || *ts > 4e9 {
		return 0, unprocessable("invalid_value", field, "must be Unix seconds in [0, 4e9]")
	}
	t := int64(*ts * float64(time.Second))
	if err := events.CheckEventTime(t, now); err != nil {
		return 0, unprocessable("invalid_value", field, err.Error())
	}
	return t, nil
}

// appendAndAnswer frames msg for its topic, appends it and answers 202 with
// the offsets, ready to pass as `after` to /v1/route.
func (s *Server) appendAndAnswer(c *gin.Context, key []byte, msg proto.Message) {
	r, err := events.NewRecord(s.deps.Names, key, msg)
	if err != nil {
		fail(c, unprocessable("invalid_record", "", err.Error()))
		return
	}
	s.appendRecords(c, r)
}

func (s *Server) appendRecords(c *gin.Context, r ...*kgoRecord) {
	// Nothing this replica writes lands in another cell's partitions.
	// Handlers check the cell earlier only where another refusal (an
	// unknown worker, the worker cap) would otherwise answer first.
	pos, err := s.appendInCell(c.Request.Context(), r...)
	if err != nil {
		fail(c, err)
		return
	}
	c.JSON(http.StatusAccepted, gin.H{"offsets": offsetsBody(pos)})
}

// appendInCell is appendLog for records keyed by a worker, refused (421
// wrong_cell) when a key is in another cell than the replica's.
func (s *Server) appendInCell(ctx context.Context, r ...*kgoRecord) ([]Position, error) {
	for _, rec := range r {
		if err := s.checkKeyCell(rec.Key); err != nil {
			return nil, err
		}
	}
	return s.appendLog(ctx, r...)
}

// appendLog makes r durable within the audit timeout and notes where it
// landed among this replica's own writes; a failure is 503
// log_unavailable, and none of r is then reported as written.
func (s *Server) appendLog(ctx context.Context, r ...*kgoRecord) ([]Position, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.auditTimeout)
	defer cancel()
	pos, err := s.deps.Log.Append(ctx, r...)
	if err != nil {
		s.cfg.log.Error("ingest append failed", "err", err)
		return nil, unavailable("log_unavailable", "the event log did not take the record; retry", 1)
	}
	s.own.note(pos)
	return pos, nil
}
