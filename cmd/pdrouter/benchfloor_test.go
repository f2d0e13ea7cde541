package main

import (
	"bytes"
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pdrouter/pdrouter/events"
	"github.com/pdrouter/pdrouter/internal/kafkatest"
	"github.com/pdrouter/pdrouter/migrations"
	"github.com/pdrouter/pdrouter/statestore"
)

// The floor replica refuses flags that would size its start-up without
// bound.
func TestFloorReplicaRefusesUnboundedFlags(t *testing.T) {
	for _, flags := range [][]string{{"--max-tokens", "0"}, {"--max-tokens", "4194304"}, {"--block-size", "0"},
		{"--decode-workers", "0"}, {"--decode-workers", "1000000"}, {"--prefill-workers", "-1"}} {
		args := append([]string{"bench", "floor-replica", "--brokers", "127.0.0.1:1"}, flags...)
		if _, _, err := run(t, nil, args...); err == nil || !strings.Contains(err.Error(), "want --max-tokens in") {
			t.Errorf("%v: err %v, want the flags' bounds", flags, err)
		}
	}
}

// A floor replica answers a body over its limit 413 without appending it,
// appends a decision and an outcome that decode as pdrouter's own records
// (no replica reading its topics meets a record it cannot decode), and
// fetches both back.
func TestFloorReplicaAppendsRealRecords(t *testing.T) {
	names := events.Names{Prefix: "floor-test."}
	r, opts := startFloorReplica(t, floorConfig{names: names, maxBlocks: 128, decode: 4, prefill: 2})
	post := func(path string, body []byte) int {
		for range 100 {
			resp, err := http.Post(r.url+path, "application/json", bytes.NewReader(body))
			if err == nil {
				resp.Body.Close()
				return resp.StatusCode
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Fatalf("POST %s: the floor replica never answered", path)
		return 0
	}
	if code := post("/v1/route", bytes.Repeat([]byte{' '}, floorBodyLimit+1)); code != http.StatusRequestEntityTooLarge {
		t.Fatalf("a body over the limit: %d, want 413", code)
	}
	if code := post("/v1/route", []byte(`{"block_hashes":[1,2,3]}`)); code != http.StatusOK {
		t.Fatalf("route: %d", code)
	}
	if code := post("/v1/requests/x/events", []byte(`{"event":"completed"}`)); code != http.StatusAccepted {
		t.Fatalf("lifecycle event: %d", code)
	}
	if err := checkFloorFetched(context.Background(), []*scaleReplica{r}); err != nil {
		t.Fatal(err)
	}
	if n, err := r.metric(context.Background(), floorAppendedMetric); err != nil || n != 2 {
		t.Fatalf("appended %v (%v), want 2: the oversized body was appended, or a record was not", n, err)
	}
	cl, err := kgo.NewClient(append(opts, kgo.ConsumeTopics(names.Physical(events.TopicDecisions), names.Physical(events.TopicOutcomes)),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	pctx, pcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer pcancel()
	for seen := 0; seen < 2; {
		fs := cl.PollFetches(pctx)
		if pctx.Err() != nil {
			t.Fatalf("read %d of the 2 records back", seen)
		}
		fs.EachRecord(func(rec *kgo.Record) {
			seen++
			if _, err := events.Decode(names, rec); err != nil {
				t.Errorf("the floor replica wrote a record pdrouter cannot decode on %s: %v", rec.Topic, err)
			}
		})
	}
}

// A floor replica that writes load deltas counts what it fetches back by
// delta entries, as it counts appends: one group commit merges the deltas
// of one decode worker into one record, which must not leave the floor
// "behind" the records its group appended.
func TestFloorReplicaCountsMergedDeltas(t *testing.T) {
	r, _ := startFloorReplica(t, floorConfig{names: events.Names{Prefix: "floor-merge."}, maxBlocks: 128,
		decode: 1, prefill: 1, writeDeltas: true, source: statestore.SourceLoadDeltas})
	// With one decode worker, every group of two or more appends merges;
	// concurrent requests make such groups, until one is seen.
	for round := 0; ; round++ {
		var wg sync.WaitGroup
		for range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				resp, err := http.Post(r.url+"/v1/route", "application/json", strings.NewReader(`{"block_hashes":[1,2]}`))
				if err != nil {
					t.Error(err)
					return
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					t.Errorf("route: %d", resp.StatusCode)
				}
			}()
		}
		wg.Wait()
		records, _ := r.metric(context.Background(), "pdrouter_load_delta_record_entries_count")
		entries, _ := r.metric(context.Background(), "pdrouter_load_delta_record_entries_sum")
		if entries > records {
			break
		}
		if round == 50 {
			t.Fatalf("no group merged two deltas in %d rounds (%v entries in %v records)", round, entries, records)
		}
	}
	if err := checkFloorFetched(context.Background(), []*scaleReplica{r}); err != nil {
		t.Fatal(err)
	}
}

// startFloorReplica runs a floor replica of cfg on a fake broker with the
// deployment's topics, until the test ends, and waits until it is ready.
func startFloorReplica(t *testing.T, cfg floorConfig) (*scaleReplica, []kgo.Opt) {
	t.Helper()
	brokers := kafkatest.Fake(t)
	specs, err := migrations.Declarations(migrations.SingleNodeOptions(cfg.names.Prefix))
	if err != nil {
		t.Fatal(err)
	}
	cfg.connOpts = []kgo.Opt{kgo.SeedBrokers(brokers...)}
	if _, err := runMigrate(context.Background(), cfg.connOpts, specs, false); err != nil {
		t.Fatal(err)
	}
	return startFloorReplicaOn(t, cfg), cfg.connOpts
}

// startFloorReplicaOn runs a floor replica of cfg on the broker and topics
// its connOpts name, until the test ends, and waits until it is ready.
func startFloorReplicaOn(t *testing.T, cfg floorConfig) *scaleReplica {
	t.Helper()
	cfg.httpAddr, cfg.addrFile = "127.0.0.1:0", filepath.Join(t.TempDir(), "addr.json")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- runFloorReplica(ctx, cfg) }()
	t.Cleanup(func() { cancel(); <-done })
	r := &scaleReplica{name: "floor", addrFile: cfg.addrFile}
	if err := r.waitReady(context.Background(), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	return r
}
