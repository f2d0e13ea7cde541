package replay_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pdrouter/pdrouter/api"
	"github.com/pdrouter/pdrouter/decider"
	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
	"github.com/pdrouter/pdrouter/internal/kafkatest"
	"github.com/pdrouter/pdrouter/statestore"
)

// replica is one real router replica for tests: a broker (kfake or the real
// Kafka), a Pebble statestore, the decider and the API over HTTP. Its
// materializer does not run in the background: the test calls catchUp when
// the replica should read the log, which is how a test makes a decision
// while another one of the same replica is still in flight.
type replica struct {
	t       *testing.T
	brokers []string
	names   events.Names
	conn    []kgo.Opt
	store   *statestore.Store
	mat     *statestore.Materializer
	srv     *httptest.Server
	id      string
	dataDir string
}

// fleetReplica migrates the topics under prefix and starts replica
// "router-a" with the test fleet registered and applied: the start of most
// tests.
func fleetReplica(t *testing.T, brokers []string, prefix string, mut func(*decider.Config)) *replica {
	t.Helper()
	kafkatest.Migrate(t, brokers, prefix)
	r := newReplica(t, brokers, prefix, "router-a", mut)
	r.setupFleet()
	r.catchUp()
	return r
}

func newReplica(t *testing.T, brokers []string, prefix, id string, mut func(*decider.Config)) *replica {
	t.Helper()
	r := &replica{t: t, brokers: brokers, names: events.Names{Prefix: prefix}, conn: []kgo.Opt{kgo.SeedBrokers(brokers...)}, id: id, dataDir: t.TempDir()}
	store, err := statestore.Open(filepath.Join(r.dataDir, "store"), statestore.Options{Names: r.names, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	r.store = store
	mat, err := statestore.NewMaterializer(store, statestore.MaterializerOptions{Client: r.conn, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	r.mat = mat
	cfg := decider.DefaultConfig()
	cfg.ConditionalDisagg = true
	if mut != nil {
		mut(&cfg)
	}
	dec, err := decider.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	prod, err := kgo.NewClient(append(append([]kgo.Opt(nil), r.conn...), api.GroupLogClientOpts()...)...)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := api.New(api.Deps{State: &api.StoreState{Store: store, Lag: mat}, Decider: dec, Log: api.NewGroupLog(prod, r.names, 64<<20, nil), Names: r.names},
		api.WithMetrics(prometheus.NewRegistry(), prometheus.NewRegistry()), api.WithLogger(slog.New(slog.DiscardHandler)),
		api.WithReplicaID(id), api.WithAfterTimeout(5*time.Second), api.WithAuditTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	r.srv = httptest.NewServer(srv.Handler())
	t.Cleanup(func() { r.srv.Close(); prod.Close(); mat.Close(); _ = store.Close() })
	return r
}

// runMaterializer keeps the replica's store current in the background, as
// `pdrouter serve` does, until the test ends.
func (r *replica) runMaterializer() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = r.mat.Run(ctx) }()
	r.t.Cleanup(func() { cancel(); <-done })
}

func (r *replica) catchUp() {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := r.mat.CatchUp(ctx); err != nil {
		r.t.Fatalf("catch up: %v", err)
	}
}

func (r *replica) do(method, path string, body any, out any) int {
	r.t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, r.srv.URL+path, rd)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		r.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 300 {
		r.t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, raw)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			r.t.Fatalf("%s %s: %v: %s", method, path, err, raw)
		}
	}
	return resp.StatusCode
}

type routeAnswer struct {
	RequestID  string `json:"request_id"`
	DecisionID string `json:"decision_id"`
	Mode       string `json:"mode"`
	Decode     string `json:"decode_worker"`
	Reason     string `json:"reason"`
	EffISL     int64  `json:"effective_isl"`
}

func (r *replica) route(id string, toks []uint32) routeAnswer {
	var a routeAnswer
	r.do("POST", "/v1/route", map[string]any{"request_id": id, "model": "m", "token_ids": toks}, &a)
	return a
}

func tokens(n int, start uint32) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = start + uint32(i)
	}
	return out
}

// setupFleet registers decode-1..3 and prefill-1..2 (block size 16), stores
// prefixes of the "documents" doc(k) on some decode workers, and sends load
// samples, all through the API's ingest endpoints.
func (r *replica) setupFleet() {
	for i := 1; i <= 3; i++ {
		r.do("POST", "/v1/workers", map[string]any{"worker_id": fmt.Sprintf("decode-%d", i), "pool": "decode", "model": "m", "block_size": 16, "total_kv_blocks": 4000}, nil)
	}
	for i := 1; i <= 2; i++ {
		r.do("POST", "/v1/workers", map[string]any{"worker_id": fmt.Sprintf("prefill-%d", i), "pool": "prefill", "model": "m", "block_size": 16, "max_num_batched_tokens": 8192}, nil)
	}
	// KV events and load samples are refused for a worker this replica has
	// not applied the registration of, and its materializer runs on demand.
	r.catchUp()
	// decode-1 holds 64 blocks of doc 0, decode-2 32 blocks of doc 1, 8 of
	// them on host; decode-3 holds 16 blocks of doc 2.
	store := func(worker string, doc, blocks int, medium string, from int) {
		toks := docTokens(doc, blocks*16)[from*16:]
		hashes := make([]any, len(toks)/16)
		for i := range hashes {
			hashes[i] = 1_000_000*doc + from + i + 1
		}
		ev := map[string]any{"type": "stored", "block_hashes": hashes, "token_ids": toks, "block_size": 16, "medium": medium, "parent_block_hash": nil}
		if from > 0 {
			ev["parent_block_hash"] = 1_000_000*doc + from
		}
		r.do("POST", "/v1/events/kv", map[string]any{"worker_id": worker, "events": []any{ev}}, nil)
	}
	store("decode-1", 0, 64, "GPU", 0)
	store("decode-2", 1, 24, "GPU", 0)
	store("decode-2", 1, 32, "CPU", 24)
	store("decode-3", 2, 16, "GPU", 0)
	for _, w := range []string{"decode-1", "decode-2", "decode-3"} {
		r.do("POST", "/v1/events/load", map[string]any{"worker_id": w, "kv_used_blocks": 100, "active_prefill_tokens": 0}, nil)
	}
	r.do("POST", "/v1/events/load", map[string]any{"worker_id": "prefill-1", "active_prefill_tokens": 4000}, nil)
}

// docTokens is the token sequence of document doc.
func docTokens(doc, n int) []uint32 { return tokens(n, uint32(doc)*100_000) }

// promptOf is a prompt that shares the first shared tokens of doc and
// continues with tail tokens of its own.
func promptOf(doc, shared, tail, salt int) []uint32 {
	p := append([]uint32(nil), docTokens(doc, shared)...)
	return append(p, tokens(tail, uint32(5_000_000+salt*10_000))...)
}

// readDecisions reads the decisions topic until it holds n records.
func readDecisions(t *testing.T, brokers []string, names events.Names, n int) []*pb.DecisionRecord {
	t.Helper()
	cl := kafkatest.Client(t, brokers, kgo.ConsumeTopics(names.Physical(events.TopicDecisions)), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	var out []*pb.DecisionRecord
	deadline := time.Now().Add(30 * time.Second)
	for len(out) < n && time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		fs := cl.PollFetches(ctx)
		cancel()
		fs.EachRecord(func(r *kgo.Record) {
			env, err := events.Decode(names, r)
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			out = append(out, env.Message.(*pb.DecisionRecord))
		})
	}
	if len(out) != n {
		t.Fatalf("decisions topic holds %d records, want %d", len(out), n)
	}
	return out
}

func byID(recs []*pb.DecisionRecord) map[string]*pb.DecisionRecord {
	m := map[string]*pb.DecisionRecord{}
	for _, r := range recs {
		m[r.GetDecisionId()] = r
	}
	return m
}
