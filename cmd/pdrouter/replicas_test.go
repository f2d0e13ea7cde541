package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/pdrouter/pdrouter/events"
	"github.com/pdrouter/pdrouter/internal/kafkatest"
)

// TestReplicasAgree is horizontal scaling's contract on the real
// broker: replicas that applied the same offsets decide the same way, share
// their active accounting through the log, catch up to the same digest after
// a SIGKILL, and a new one joins from a peer's snapshot without replaying
// the log. Concurrent decisions on one decode worker show up as races.
//
// Each --load-deltas mode that shapes the state runs it: write (peers
// apply whole decisions and outcomes), apply (peers apply load deltas,
// and decisions stay on the log for audit), the latter with each
// --peer-requests layout (memory: open requests checkpointed, so C's
// SIGKILL reads the load deltas since the checkpoint again; pebble: a
// fact per request), and snapshots (peers keep rows of each other's load
// shares; a replica's own requests, from its own partition of
// load-deltas, are its own: the replicas compare the offsets and digest
// of what they share, and agree once each one's latest snapshot is
// applied everywhere).
func TestReplicasAgree(t *testing.T) {
	for _, mode := range []string{"write", "apply", "apply-pebble", "snapshots"} {
		t.Run(mode, func(t *testing.T) { testReplicasAgree(t, mode) })
	}
}

func testReplicasAgree(t *testing.T, mode string) {
	mode, layout, _ := strings.Cut(mode, "-")
	if layout == "" {
		layout = "memory"
	}
	brokers := kafkatest.Brokers(t)
	prefix := kafkatest.Prefix(t)
	kafkatest.Migrate(t, brokers, prefix)
	begin := time.Now()
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	// Fetches answered at once (the default batches up to 10 ms): part 1's
	// barrier must reach each replica alone, not in one fetch with the
	// decision a faster peer made just after it, or the replicas decide at
	// different watermarks and there is nothing to compare.
	unbatched := []string{"--fetch-min-bytes", "1", "--load-deltas", mode, "--peer-requests", layout}
	peerTopic := events.TopicDecisions // where a peer learns a decision from
	switch mode {
	case "apply":
		peerTopic = events.TopicLoadDeltas
	case "snapshots":
		peerTopic = events.TopicLoadShares
	}
	snapshots := mode == "snapshots"
	// start starts a replica; with snapshots it keeps its id across
	// restarts (its own requests are read back from its own partition),
	// and its own partition of load-deltas is not compared with its peers'.
	start := func(dir, id string, extra ...string) *replica {
		args := slices.Concat(unbatched, extra)
		if snapshots {
			args = append(args, "--replica-id", id)
		}
		r := startReplica(t, brokers, prefix, dir, args...)
		if snapshots {
			r.private = string(events.TopicLoadDeltas)
		}
		return r
	}
	a := start(dirs[0], "ra")
	b := start(dirs[1], "rb")
	c := start(dirs[2], "rc")
	t.Logf("three replicas ready in %s", time.Since(begin).Round(time.Millisecond))

	registerFleet(t, a.url)
	all := []*replica{a, b, c}
	waitSynced(t, all...) // B must know the workers A registered before it takes their KV events
	// d1 holds a 32-block prefix (512 tokens), so prompts that share it are
	// cheaper there and may be prefilled locally.
	prefixToks := tokenSeq(1, 512)
	postKVBlocks(t, b.url, "d1", prefixToks)
	waitSynced(t, all...)

	// 1. Same request, same `after` bound: identical decisions. The bound
	// is a barrier: one record past the log's end (a load sample of p1,
	// written once the three requests wait for it). Each replica passes its
	// idempotency check before the barrier exists, so none can replay a
	// peer's decision for the same request id; each then decides on the
	// state at its watermark. Replicas at equal watermarks must agree.
	loadTopic, loadPart := postLoadSample(t, a.url, "p1")
	prompts := [][]uint32{
		append(tokenSeq(1, 512), tokenSeq(90001, 100)...),           // cached prefix, short tail: local
		tokenSeq(70001, 3000),                                       // nothing cached: remote
		append(tokenSeq(1, 256), tokenSeq(80001, 2000)...),          // ratio too high: remote
		append(tokenSeq(1, 512), tokenSeq(60001, 16*40)...),         // cached prefix, longer tail
		append(append(tokenSeq(1, 512), 7), tokenSeq(50001, 15)...), // partial block after the prefix
	}
	compared := 0
	for k := 0; k < 3*len(prompts) && compared < len(prompts); k++ {
		toks := prompts[k%len(prompts)]
		if snapshots {
			waitSharesSent(t, all...)
		}
		applied := waitSynced(t, all...)
		if snapshots {
			waitSameActive(t, all...)
		}
		after := lastWritten(applied)
		if after[loadTopic] == nil {
			after[loadTopic] = map[string]int64{}
		}
		after[loadTopic][loadPart] = applied[loadTopic][loadPart] // the next load sample of p1
		id := fmt.Sprintf("same-%d", k)
		resps := make([]map[string]any, len(all))
		var wg sync.WaitGroup
		for i, r := range all {
			wg.Add(1)
			go func() {
				defer wg.Done()
				resps[i] = routeOn(t, r.url, id, toks, after, true)
			}()
		}
		time.Sleep(300 * time.Millisecond) // the requests are parked on the barrier
		if tp, part := postLoadSample(t, b.url, "p1"); tp != loadTopic || part != loadPart {
			t.Fatalf("p1's load samples moved from %s/%s to %s/%s", loadTopic, loadPart, tp, part)
		}
		wg.Wait()
		ids := map[any]bool{}
		marks := map[string]bool{}
		for i, r := range resps {
			ids[r["decision_id"]] = true
			marks[indented(all[i].shared(r)["watermark"])] = true
		}
		if len(ids) < len(all) {
			t.Fatalf("request %s: %d distinct decisions of %d: a replica replayed a peer's decision despite the barrier", id, len(ids), len(all))
		}
		if len(marks) > 1 {
			// A replica applied a peer's decision for this request before
			// deciding: a different state, legitimately a different decision.
			t.Logf("request %s: the replicas decided at %d different watermarks; not compared", id, len(marks))
			continue
		}
		compared++
		if cands, _ := resps[0]["candidates"].([]any); len(cands) < 3 {
			t.Fatalf("request %s: ?explain=true returned %d candidates, want the full table (d1, d2, p1)", id, len(cands))
		}
		want := all[0].shared(withoutLocal(resps[0]))
		for i := 1; i < len(all); i++ {
			if got := all[i].shared(withoutLocal(resps[i])); !reflect.DeepEqual(want, got) {
				t.Errorf("request %s at the same watermark: replica %d decided\n%s\nreplica 0 decided\n%s", id, i, indented(got), indented(want))
			}
		}
		t.Logf("request %s: %v/%v on %v, reason %v, cached %v: identical on %d replicas",
			id, resps[0]["mode"], resps[0]["decode_worker"], resps[0]["prefill_worker"], resps[0]["reason"], resps[0]["cached_tokens"], len(all))
	}
	if compared < 3 {
		t.Fatalf("only %d requests were decided by every replica at one watermark: the comparison proves too little", compared)
	}

	// 2. A's decision reaches B's active accounting through the log.
	after := lastWritten(waitSynced(t, all...))
	beforeB := activeBlocks(t, b.url)
	resp := routeOn(t, a.url, "accounting-1", append(tokenSeq(1, 512), tokenSeq(40001, 64)...), after, false)
	dw := resp["decode_worker"].(string)
	var afterB map[string]int64
	if snapshots {
		// A's snapshot follows its decision's append: wait for it.
		afterB = waitActive(t, b, dw, func(n int64) bool { return n > beforeB[dw] })
	} else {
		ends := topicEnds(t, brokers, prefix, peerTopic)
		waitApplied(t, b, peerTopic, ends)
		afterB = activeBlocks(t, b.url)
	}
	if afterB[dw] <= beforeB[dw] {
		t.Errorf("B's active decode blocks on %s stayed %d → %d after applying A's decision from %s", dw, beforeB[dw], afterB[dw], peerTopic)
	}
	if snapshots {
		waitSharesSent(t, all...)
	}
	waitSynced(t, all...)
	if snapshots {
		waitSameActive(t, all...)
	}
	if fromA := activeBlocks(t, a.url); !reflect.DeepEqual(fromA, activeBlocks(t, b.url)) {
		t.Errorf("at equal offsets A and B count different active blocks: %v vs %v", fromA, activeBlocks(t, b.url))
	}
	t.Logf("A's decision on %s: B's active decode blocks %d → %d", dw, beforeB[dw], afterB[dw])
	if snapshots {
		checkSnapshotsShare(t, a, b, resp)
		// The request ends on A: A's next snapshot lowers its share, and B
		// counts what it counted before A decided.
		if code, raw, err := post(a.url+"/v1/requests/accounting-1/events", map[string]any{"event": "completed"}); err != nil || code != http.StatusAccepted {
			t.Fatalf("completing accounting-1 on A: %d %s %v", code, raw, err)
		}
		if ended := waitActive(t, b, dw, func(n int64) bool { return n == beforeB[dw] }); ended[dw] != beforeB[dw] {
			t.Errorf("after A's request ended, B counts %d active blocks on %s, want %d as before it", ended[dw], dw, beforeB[dw])
		}
	}
	if mode == "apply" {
		var st replicaState
		getJSONInto(t, b.url+"/v1/state", &st)
		if st.Applied[string(events.TopicDecisions)] != nil || st.Applied[string(events.TopicOutcomes)] != nil || st.Applied[string(events.TopicLoadDeltas)] == nil {
			t.Errorf("with --load-deltas apply, B applied %v", st.Applied)
		}
		// The deciding replica serves its own decision whole, from the
		// position its append returned.
		var rec map[string]any
		getJSONInto(t, a.url+"/v1/decisions/"+resp["decision_id"].(string), &rec)
		if rec["decision_id"] != resp["decision_id"] || rec["candidates"] == nil {
			t.Errorf("A's own decision read back whole: %s", indented(rec))
		}
		// B knows A's decision from its delta only, without its position:
		// it finds the whole record on the decisions topic by its decode
		// worker and decided_at.
		var found map[string]any
		getJSONInto(t, b.url+"/v1/decisions/"+resp["decision_id"].(string), &found)
		if !reflect.DeepEqual(found, rec) {
			t.Errorf("B found A's decision on the log as\n%s\nA serves it as\n%s", indented(found), indented(rec))
		}
		if n := metricSum(t, b.url, `pdrouter_decision_record_reads_total{lookup="search",result="ok"}`); n != 1 {
			t.Errorf("B's pdrouter_decision_record_reads_total{lookup=search,result=ok} = %v, want 1", n)
		}
		// A retry on A itself, once its own record was applied back, is its
		// decision too: the prompt is checked against the whole record,
		// which a delta does not carry.
		if own := routeOn(t, a.url, "accounting-1", append(tokenSeq(1, 512), tokenSeq(40001, 64)...), nil, false); own["decision_id"] != resp["decision_id"] || own["idempotent_replay"] != true {
			t.Errorf("the retry on A: %s, want its decision %v replayed", indented(own), resp["decision_id"])
		}
		// A retry of A's request on B is A's decision (its prompt checked
		// against the whole record), and another prompt under the same
		// request id is refused.
		again := routeOn(t, b.url, "accounting-1", append(tokenSeq(1, 512), tokenSeq(40001, 64)...), nil, false)
		if again["decision_id"] != resp["decision_id"] || again["idempotent_replay"] != true {
			t.Errorf("the retry on B: %s, want A's decision %v replayed", indented(again), resp["decision_id"])
		}
		if code, raw, _ := post(b.url+"/v1/route", map[string]any{"request_id": "accounting-1", "token_ids": tokenSeq(7, 100)}); code != http.StatusConflict {
			t.Errorf("another prompt under A's request id on B: %d %s, want 409", code, raw)
		}
	}
	if mode != "write" {
		// explain rebuilds the state at the decision's watermark from what
		// it names (load-deltas; with snapshots, the decider's own partition
		// of it and load-shares) and decides the same again.
		out, errOut, err := run(t, map[string]string{"PDR_BROKERS": strings.Join(brokers, ","), "PDR_TOPIC_PREFIX": prefix},
			"explain", resp["decision_id"].(string), "--data-dir", t.TempDir())
		if err != nil || !strings.Contains(out, "state check (state rebuilt at the watermark from the log): identical") {
			t.Errorf("explain of a decision made with --load-deltas %s: %v\n%s\n%s", mode, err, out, errOut)
		}
	}

	// 3. SIGKILL C; the log moves on; C restarts on its store and catches up
	// to the same digest.
	if err := c.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = c.cmd.Wait()
	for i := range 6 {
		r := []*replica{a, b}[i%2]
		routeOn(t, r.url, fmt.Sprintf("while-c-down-%d", i), append(tokenSeq(1, 512), tokenSeq(uint32(30001+100*i), 48)...), nil, false)
	}
	postKVBlocks(t, a.url, "d2", tokenSeq(20001, 256))
	restart := time.Now()
	c = start(dirs[2], "rc")
	t.Logf("C restarted on its store and was ready in %s", time.Since(restart).Round(time.Millisecond))
	all = []*replica{a, b, c}
	waitSynced(t, all...)
	sameDigest(t, all...)

	// 4. D joins from A's snapshot: it applies only what came after it.
	// With snapshots a peer's store holds that peer's own requests, so D
	// reads the log instead (serve refuses --bootstrap-from there).
	join := time.Now()
	var d *replica
	if snapshots {
		d = start(t.TempDir(), "rd")
	} else {
		d = startReplica(t, brokers, prefix, t.TempDir(), "--bootstrap-from", a.url+"/v1/state/snapshot", "--load-deltas", mode, "--peer-requests", layout)
	}
	joinTook := time.Since(join)
	if joinTook > 30*time.Second {
		t.Errorf("D took %s to join from a snapshot", joinTook)
	}
	all = []*replica{a, b, c, d}
	waitSynced(t, all...)
	sameDigest(t, all...)
	appliedA, appliedD := metricSum(t, a.url, "pdrouter_statestore_applied_records_total"), metricSum(t, d.url, "pdrouter_statestore_applied_records_total")
	if !snapshots && (appliedA == 0 || appliedD*2 > appliedA) {
		t.Errorf("D applied %v records, A %v: D replayed the log instead of starting from the snapshot", appliedD, appliedA)
	}
	how := "from a snapshot"
	if snapshots {
		how = "by reading the log"
	}
	t.Logf("D joined %s in %s (process start to /readyz 200); it applied %v records, A %v", how, joinTook.Round(time.Millisecond), appliedD, appliedA)

	// 5. Concurrent decisions on A and B for the same decode worker are
	// counted as races.
	racesBefore := metricSum(t, a.url, "pdrouter_active_decision_races_total") + metricSum(t, b.url, "pdrouter_active_decision_races_total")
	var wg sync.WaitGroup
	for _, r := range []*replica{a, b} {
		for g := range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 15 {
					toks := append(tokenSeq(1, 512), tokenSeq(uint32(1_000_000+g*10_000+i*100), 32)...)
					routeOn(t, r.url, fmt.Sprintf("race-%s-%d-%d", r.url, g, i), toks, nil, false)
				}
			}()
		}
	}
	wg.Wait()
	if snapshots {
		waitSharesSent(t, all...)
	}
	waitSynced(t, all...)
	races := metricSum(t, a.url, "pdrouter_active_decision_races_total") + metricSum(t, b.url, "pdrouter_active_decision_races_total") - racesBefore
	if snapshots {
		// Rows carry no decisions to race with; the replicas still agree
		// once the snapshots are through.
		waitSameActive(t, all...)
	} else if races <= 0 {
		t.Errorf("90 concurrent decisions on A and B for the same decode worker: no race counted in pdrouter_active_decision_races_total")
	}
	sameDigest(t, all...)
	t.Logf("concurrent decisions on A and B: %v races counted; total %s", races, time.Since(begin).Round(time.Millisecond))

	// D's log is readable once the process is gone (SIGTERM: a clean stop).
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	if err := d.cmd.Wait(); err != nil {
		t.Errorf("D on SIGTERM: %v", err)
	}
	if !snapshots && !strings.Contains(d.logs.String(), "bootstrapped from a peer snapshot") {
		t.Errorf("D did not log a bootstrap from the peer's snapshot")
	}
}

// seq returns n token ids from first on.
func tokenSeq(first uint32, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = first + uint32(i)
	}
	return out
}

// postKV stores toks (whole 16-token blocks) on worker as device blocks.
func postKVBlocks(t *testing.T, url, worker string, toks []uint32) {
	t.Helper()
	n := len(toks) / 16
	hashes := make([]uint64, n)
	for i := range hashes {
		hashes[i] = uint64(len(worker))<<32 | uint64(toks[0])<<8 | uint64(i+1)
	}
	body := map[string]any{"worker_id": worker, "ts": float64(time.Now().UnixMilli()) / 1000,
		"events": []any{map[string]any{"type": "stored", "block_hashes": hashes, "parent_block_hash": nil,
			"token_ids": toks[:n*16], "block_size": 16, "medium": "GPU"}}}
	code, raw, err := post(url+"/v1/events/kv", body)
	if err != nil || code != http.StatusAccepted {
		t.Fatalf("POST /v1/events/kv: %d %s %v", code, raw, err)
	}
}

// postLoad writes a load sample of worker and returns the topic and
// partition it went to.
func postLoadSample(t *testing.T, url, worker string) (topic, partition string) {
	t.Helper()
	body := map[string]any{"worker_id": worker, "ts": float64(time.Now().UnixMilli()) / 1000,
		"num_requests_running": 1, "num_requests_waiting": 0, "active_prefill_tokens": 0}
	code, raw, err := post(url+"/v1/events/load", body)
	if err != nil || code != http.StatusAccepted {
		t.Fatalf("POST /v1/events/load: %d %s %v", code, raw, err)
	}
	var o struct {
		Offsets map[string]map[string]int64 `json:"offsets"`
	}
	if err := json.Unmarshal(raw, &o); err != nil || len(o.Offsets) != 1 {
		t.Fatalf("POST /v1/events/load: offsets %s", raw)
	}
	for tp, ps := range o.Offsets {
		for p := range ps {
			return tp, p
		}
	}
	return "", ""
}

// route asks url for a decision and returns the response body.
func routeOn(t *testing.T, url, id string, toks []uint32, after map[string]map[string]int64, explain bool) map[string]any {
	t.Helper()
	q := ""
	if explain {
		q = "?explain=true"
	}
	body := map[string]any{"request_id": id, "token_ids": toks}
	if after != nil {
		body["after"] = after
	}
	code, raw, err := post(url+"/v1/route"+q, body)
	if err != nil || code != http.StatusOK {
		t.Errorf("POST %s/v1/route %s: %d %s %v", url, id, code, raw, err)
		return map[string]any{}
	}
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// withoutLocal drops what is local to the replica that answered: the
// decision's id (each replica mints its own).
func withoutLocal(resp map[string]any) map[string]any {
	out := maps.Clone(resp)
	delete(out, "decision_id")
	return out
}

func indented(v any) string {
	b, _ := json.MarshalIndent(v, "", "  ")
	return string(b)
}

type replicaState struct {
	Applied  map[string]map[string]int64 `json:"applied"`
	TotalLag int64                       `json:"total_lag"`
	Digest   string                      `json:"digest"`
}

func getJSONInto(t *testing.T, url string, out any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, raw)
	}
	if err := json.Unmarshal(raw, out); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
}

// waitSynced waits until every replica has applied the whole log (lag 0)
// and all report the same offsets, and returns those offsets.
func waitSynced(t *testing.T, rs ...*replica) map[string]map[string]int64 {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		var first map[string]map[string]int64
		ok := true
		for i, r := range rs {
			var st replicaState
			getJSONInto(t, r.url+"/v1/state", &st)
			applied := r.sharedOffsets(st.Applied)
			if st.TotalLag != 0 || (i > 0 && !reflect.DeepEqual(first, applied)) {
				ok = false
			}
			if i == 0 {
				first = applied
			}
		}
		if ok {
			return first
		}
		if time.Now().After(deadline) {
			t.Fatalf("replicas did not reach the same offsets with no lag within 20s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// lastWritten turns applied offsets (the next offset per partition, as GET
// /v1/state reports them) into an `after` bound: the offset of the last
// record to wait for, as the write endpoints report theirs.
func lastWritten(applied map[string]map[string]int64) map[string]map[string]int64 {
	out := map[string]map[string]int64{}
	for tp, ps := range applied {
		for p, next := range ps {
			if next == 0 {
				continue
			}
			if out[tp] == nil {
				out[tp] = map[string]int64{}
			}
			out[tp][p] = next - 1
		}
	}
	return out
}

// sameDigest checks that replicas at equal offsets hold byte-identical state.
func sameDigest(t *testing.T, rs ...*replica) {
	t.Helper()
	var want replicaState
	for i, r := range rs {
		var st replicaState
		getJSONInto(t, r.url+"/v1/state", &st)
		st.Applied = r.sharedOffsets(st.Applied)
		if i == 0 {
			want = st
			continue
		}
		if !reflect.DeepEqual(st.Applied, want.Applied) {
			t.Fatalf("replica %d applied %v, replica 0 %v: not at equal offsets", i, st.Applied, want.Applied)
		}
		if st.Digest != want.Digest {
			t.Errorf("replica %d digest %s, replica 0 %s, at the same offsets", i, st.Digest, want.Digest)
		}
	}
}

// activeBlocks returns the active decode blocks per worker of GET /v1/workers.
func activeBlocks(t *testing.T, url string) map[string]int64 {
	t.Helper()
	var ws []struct {
		WorkerID string `json:"worker_id"`
		DPRank   uint32 `json:"dp_rank"`
		Active   int64  `json:"active_decode_blocks"`
	}
	var body json.RawMessage
	getJSONInto(t, url+"/v1/workers", &body)
	var wrapped struct {
		Workers json.RawMessage `json:"workers"`
	}
	if json.Unmarshal(body, &wrapped) == nil && wrapped.Workers != nil {
		body = wrapped.Workers
	}
	if err := json.Unmarshal(body, &ws); err != nil {
		t.Fatalf("GET /v1/workers: %v: %s", err, body)
	}
	out := map[string]int64{}
	for _, w := range ws {
		out[w.WorkerID] += w.Active
	}
	return out
}

// topicEnds returns the end offsets of a topic.
func topicEnds(t *testing.T, brokers []string, prefix string, topic events.Topic) map[int32]int64 {
	t.Helper()
	names := events.Names{Prefix: prefix}
	adm := kadm.NewClient(kafkatest.Client(t, brokers))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ends, err := adm.ListEndOffsets(ctx, names.Physical(topic))
	if err != nil || ends.Error() != nil {
		t.Fatalf("end offsets: %v %v", err, ends.Error())
	}
	out := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) { out[o.Partition] = o.Offset })
	return out
}

// waitApplied waits until r has applied topic up to ends.
func waitApplied(t *testing.T, r *replica, topic events.Topic, ends map[int32]int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var st replicaState
		getJSONInto(t, r.url+"/v1/state", &st)
		done := true
		for p, end := range ends {
			if st.Applied[string(topic)][strconv.Itoa(int(p))] < end {
				done = false
			}
		}
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not apply %s up to %v within 10s: %v", r.url, topic, ends, st.Applied[string(topic)])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// metric sums the samples of one metric on url's /metrics; a labelled
// metric with no sample yet is absent from /metrics, and sums to 0.
func metricSum(t *testing.T, url, name string) float64 {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var sum float64
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+" ") && !strings.HasPrefix(line, name+"{") {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			t.Fatalf("%s: %q", name, line)
		}
		sum += v
	}
	return sum
}

// sharedOffsets is applied without the replica's private topic.
func (r *replica) sharedOffsets(applied map[string]map[string]int64) map[string]map[string]int64 {
	if r.private == "" || applied[r.private] == nil {
		return applied
	}
	out := maps.Clone(applied)
	delete(out, r.private)
	return out
}

// shared is a decision response without the private topic's part of its
// watermark: what two replicas that decided alike have in common.
func (r *replica) shared(resp map[string]any) map[string]any {
	wm, ok := resp["watermark"].(map[string]any)
	if r.private == "" || !ok {
		return resp
	}
	out := maps.Clone(resp)
	wm = maps.Clone(wm)
	delete(wm, r.private)
	out["watermark"] = wm
	return out
}

// waitSharesSent waits until no replica of --load-deltas snapshots has a
// share it changed that the log has not acknowledged: a replica counts its
// own requests from the moment it decides, its peers only from its
// snapshot, so views agree at equal offsets only once every snapshot is
// on the log (then waitSynced) and applied. Equal views alone are no
// sign of it: right after each replica decided one request of its own,
// each counts that one alone, and all agree until the snapshots land.
func waitSharesSent(t *testing.T, rs ...*replica) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		unsent := 0.0
		for _, r := range rs {
			unsent += metricSum(t, r.url, "pdrouter_statestore_share_unsent_workers")
		}
		if unsent == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the replicas still had %v shares unsent after 10s", unsent)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitSameActive waits until every replica counts the same active decode
// blocks on every worker: with snapshots, once each replica's latest
// snapshot, appended after its latest decision, is applied by the others
// (waitSharesSent, then waitSynced, comes first).
func waitSameActive(t *testing.T, rs ...*replica) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		want := activeBlocks(t, rs[0].url)
		same := true
		for _, r := range rs[1:] {
			if !reflect.DeepEqual(want, activeBlocks(t, r.url)) {
				same = false
			}
		}
		if same {
			return
		}
		if time.Now().After(deadline) {
			for _, r := range rs {
				t.Logf("%s counts %v", r.url, activeBlocks(t, r.url))
			}
			t.Fatalf("the replicas did not count the same active blocks within 10s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitActive waits (10 s at most) until r's active decode blocks on worker
// meet ok, and returns its counts.
func waitActive(t *testing.T, r *replica, worker string, ok func(int64) bool) map[string]int64 {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := activeBlocks(t, r.url)
		if ok(got[worker]) || time.Now().After(deadline) {
			return got
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// checkSnapshotsShare checks what a replica of a group that shares load as
// snapshots reads: load-shares, its own partition of load-deltas only, and
// never decisions or outcomes; a peer's decision, which it does not hold,
// is still found on the decisions topic whole.
func checkSnapshotsShare(t *testing.T, a, b *replica, resp map[string]any) {
	t.Helper()
	var st replicaState
	getJSONInto(t, b.url+"/v1/state", &st)
	own := strconv.Itoa(int(events.WriterPartition("rb", 16, events.Cell{})))
	if st.Applied[string(events.TopicDecisions)] != nil || st.Applied[string(events.TopicOutcomes)] != nil ||
		st.Applied[string(events.TopicLoadShares)] == nil || len(st.Applied[string(events.TopicLoadDeltas)]) != 1 {
		t.Errorf("with --load-deltas snapshots, B applied %v", st.Applied)
	} else if _, ok := st.Applied[string(events.TopicLoadDeltas)][own]; !ok {
		t.Errorf("B applied load-deltas partitions %v, want only its own, %s", st.Applied[string(events.TopicLoadDeltas)], own)
	}
	var rec, found map[string]any
	getJSONInto(t, a.url+"/v1/decisions/"+resp["decision_id"].(string), &rec)
	getJSONInto(t, b.url+"/v1/decisions/"+resp["decision_id"].(string), &found)
	if rec["decision_id"] != resp["decision_id"] || !reflect.DeepEqual(found, rec) {
		t.Errorf("B found A's decision on the log as\n%s\nA serves it as\n%s", indented(found), indented(rec))
	}
}
