package ingest

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"

	pb "github.com/pdrouter/pdrouter/events/eventspb"
)

func vectorNames() []string {
	var names []string
	for _, vc := range payloadVectors() {
		names = append(names, vc.name)
	}
	return names
}

// checkVectorRecords checks that recs (after the first-contact reset) are
// the vectors in order, each decoded as expected, with its raw bytes.
func checkVectorRecords(t *testing.T, recs []*pb.KvEventRecord, firstSeq uint64, worker string) {
	t.Helper()
	payloads, _ := loadVectors(t)
	cases := payloadVectors()
	if len(recs) != len(cases)+1 {
		t.Fatalf("%d records, want a reset and %d vectors: %v", len(recs), len(cases), summary(recs))
	}
	if recs[0].GetEvents()[0].GetSourceReset() == nil {
		t.Errorf("first record is not the first-contact reset: %v", recs[0])
	}
	for i, vc := range cases {
		r := recs[i+1]
		if r.GetSource().GetSeq() != firstSeq+uint64(i) {
			t.Errorf("%s: seq %d, want %d", vc.name, r.GetSource().GetSeq(), firstSeq+uint64(i))
		}
		if !bytes.Equal(r.GetRaw().GetPayload(), payloads[vc.name]) {
			t.Errorf("%s: raw payload differs", vc.name)
		}
		if r.GetWorker().GetWorkerId() != worker {
			t.Errorf("%s: worker %v", vc.name, r.GetWorker())
		}
		want := vc.want
		if r.GetEventTimeUnixNano() != want.TimeUnixNano {
			t.Errorf("%s: event time %d, want %d", vc.name, r.GetEventTimeUnixNano(), want.TimeUnixNano)
		}
		batchEqual(t, vc.name, &Batch{TimeUnixNano: r.GetEventTimeUnixNano(), Events: r.GetEvents(), DPRank: want.DPRank,
			HasDPRank: want.HasDPRank, Encoding: want.Encoding}, want)
	}
}

// TestZMQInteropPyzmq: a libzmq PUB (pyzmq) that binds, go-zeromq SUB that
// connects with a topic filter; every vector crosses a real socket and
// decodes to its expected events. The publisher sends before ingest has
// even connected, so the first-contact replay (DEALER against libzmq's
// ROUTER) must recover them.
func TestZMQInteropPyzmq(t *testing.T) {
	for _, gen := range []string{"old", "new"} {
		t.Run("replay-"+gen, func(t *testing.T) {
			p := startPyPub(t, "--replay", "tcp://127.0.0.1:*", "--topic", "kv@pod-1@llama", "--reply-gen", gen)
			// Published before any subscriber: PUB drops them; replay has them.
			p.Do(map[string]any{"cmd": "vectors", "names": vectorNames()[:4]})
			sink := &memSink{}
			runIngest(t, Config{Sources: []SourceConfig{{WorkerID: "decode-1", Endpoint: p.Pub, Replay: p.Replay, Topic: "kv@"}}},
				Deps{Sink: sink})
			p.Do(map[string]any{"cmd": "wait_sub"})
			p.Do(map[string]any{"cmd": "vectors", "names": vectorNames()[4:]})
			waitFor(t, 20*time.Second, "every vector", func() bool { return len(sink.kv()) >= len(payloadVectors())+1 })
			recs := sink.kv()
			checkVectorRecords(t, recs, 0, "decode-1")
			for _, r := range recs[1:] {
				if r.GetSource().GetTopic() != "kv@pod-1@llama" || r.GetSource().GetEndpoint() != p.Pub {
					t.Errorf("source %v", r.GetSource())
				}
			}
		})
	}
}

// TestZMQBindModeTopicFilter: ingest binds; two libzmq publishers connect
// (as vLLM does with a non-wildcard endpoint); the filter admits only one
// topic, and that topic is mapped to its worker.
func TestZMQBindModeTopicFilter(t *testing.T) {
	venvPython(t)
	sink := &memSink{}
	ready := make(chan string, 1)
	runIngest(t, Config{Bind: "tcp://127.0.0.1:0", BindTopic: "kv@",
		Sources: []SourceConfig{{WorkerID: "prefill-7", Topic: "kv@10.0.0.7@llama", Engine: "sglang"}}},
		Deps{Sink: sink, BindReady: func(a string) { ready <- a }})
	addr := <-ready
	a := startPyPub(t, "--connect", addr, "--topic", "kv@10.0.0.7@llama")
	b := startPyPub(t, "--connect", addr, "--topic", "other@10.0.0.8")
	a.Do(map[string]any{"cmd": "wait_sub"})
	b.Do(map[string]any{"cmd": "wait_sub"})
	b.Do(map[string]any{"cmd": "emit", "n": 3})
	a.Do(map[string]any{"cmd": "emit", "n": 3, "gen": "map", "rank": 2})
	waitFor(t, 10*time.Second, "3 batches and a reset", func() bool { return len(sink.kv()) >= 4 })
	time.Sleep(200 * time.Millisecond)
	recs := sink.kv()
	if got := fmt.Sprint(summary(recs)); got != "[R4 0 1 2]" {
		t.Fatalf("records %s", got)
	}
	for _, r := range recs {
		if r.GetWorker().GetWorkerId() != "prefill-7" || r.GetWorker().GetDpRank() != 2 || r.GetSource().GetEngine() != pb.Engine_ENGINE_SGLANG {
			t.Errorf("record %v", r)
		}
	}
	if r := recs[1]; r.GetRaw().GetFormat() != pb.RawFormat_RAW_FORMAT_SGLANG_MSGPACK || r.GetEvents()[0].GetStored() == nil {
		t.Errorf("record %v", r)
	}
}

// TestZMQGapReplay: batches the publisher buffered but did not send (as
// PUB does past its high-water mark) are fetched through replay, in both
// reply generations, and land in order; a stretch gone from the buffer
// becomes a reset.
func TestZMQGapReplay(t *testing.T) {
	for _, gen := range []string{"old", "new"} {
		t.Run(gen, func(t *testing.T) {
			p := startPyPub(t, "--replay", "tcp://127.0.0.1:*", "--reply-gen", gen)
			sink := &memSink{}
			ing, _ := runIngest(t, Config{Sources: []SourceConfig{{WorkerID: "w", Endpoint: p.Pub, Replay: p.Replay}}}, Deps{Sink: sink})
			p.Do(map[string]any{"cmd": "wait_sub"})
			p.Do(map[string]any{"cmd": "emit", "n": 2, "first": 100})                // 0, 1
			p.Do(map[string]any{"cmd": "skip", "n": 3, "first": 102, "root": false}) // 2..4 dropped
			p.Do(map[string]any{"cmd": "emit", "n": 1, "first": 105, "root": false}) // 5
			waitFor(t, 10*time.Second, "6 batches", func() bool { return len(sink.kv()) >= 7 })
			p.Do(map[string]any{"cmd": "skip", "n": 2, "first": 106, "root": false}) // 6, 7 dropped
			p.Do(map[string]any{"cmd": "forget_before", "seq": 7})                   // 6 gone from the buffer
			p.Do(map[string]any{"cmd": "emit", "n": 1, "first": 108, "root": false}) // 8
			waitFor(t, 10*time.Second, "the rest", func() bool { return len(sink.kv()) >= 10 })
			recs := sink.kv()
			if got := fmt.Sprint(summary(recs)); got != "[R4 0 1 2 3 4 5 R2 7 8]" {
				t.Fatalf("records %s", got)
			}
			for _, r := range recs {
				if s := r.GetEvents()[0].GetStored(); s != nil && s.GetBlockHashes()[0] != 100+r.GetSource().GetSeq() {
					t.Errorf("seq %d carries hash %d", r.GetSource().GetSeq(), s.GetBlockHashes()[0])
				}
			}
			m := ing.Metrics()
			if v := counterValue(t, m.Gaps.WithLabelValues("w")); v != 2 {
				t.Errorf("gaps %v, want 2", v)
			}
			if v := counterValue(t, m.Replayed.WithLabelValues("w")); v != 4 {
				t.Errorf("replayed %v, want 4 (2, 3, 4, 7)", v)
			}
		})
	}
}

// TestZMQPublisherRestart: the engine is killed and restarted on the same
// port; its seq starts again at 0, ingest reconnects and writes a
// SEQUENCE_RESTART reset before the new process's batches.
func TestZMQPublisherRestart(t *testing.T) {
	port := freePort(t)
	ep := fmt.Sprintf("tcp://127.0.0.1:%d", port)
	p := startPyPub(t, "--bind", ep)
	sink := &memSink{}
	runIngest(t, Config{ReconnectInterval: 100 * time.Millisecond, Sources: []SourceConfig{{WorkerID: "w", Endpoint: ep}}}, Deps{Sink: sink})
	p.Do(map[string]any{"cmd": "wait_sub"})
	p.Do(map[string]any{"cmd": "emit", "n": 5})
	waitFor(t, 10*time.Second, "5 batches", func() bool { return len(sink.kv()) >= 6 })
	p.Kill()
	p2 := startPyPub(t, "--bind", ep)
	p2.Do(map[string]any{"cmd": "wait_sub"})
	p2.Do(map[string]any{"cmd": "emit", "n": 2, "first": 500})
	waitFor(t, 15*time.Second, "the restarted engine's batches", func() bool { return len(sink.kv()) >= 9 })
	recs := sink.kv()
	if got := fmt.Sprint(summary(recs)); got != "[R4 0 1 2 3 4 R1 0 1]" {
		t.Fatalf("records %s", got)
	}
	r := recs[6].GetEvents()[0].GetSourceReset()
	if r.GetLastSeq() != 4 || r.GetNextSeq() != 0 || !strings.Contains(r.GetDetail(), "restarted") {
		t.Errorf("reset %v", r)
	}
	if recs[7].GetSource().GetEpoch() != recs[5].GetSource().GetEpoch()+1 {
		t.Errorf("epoch did not advance: %d -> %d", recs[5].GetSource().GetEpoch(), recs[7].GetSource().GetEpoch())
	}
}

// pumpGoPub publishes increasing seqs on a go-zeromq PUB until ingest
// writes something (PUB drops what it sends before the subscription
// arrives), then more batches, and checks that everything after the
// first-contact reset arrived in order, once, with its bytes.
func pumpGoPub(t *testing.T, pub zmq4.Socket, sink *memSink, more int) {
	t.Helper()
	payload := func(seq uint64) []byte { return seqPayload(t, seq) }
	var seq uint64
	deadline := time.Now().Add(10 * time.Second)
	for len(sink.kv()) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("ingest never received a message")
		}
		if err := pub.Send(zmq4.NewMsgFrom([]byte("kv@w"), SeqFrame(seq), payload(seq))); err != nil {
			t.Fatal(err)
		}
		seq++
		time.Sleep(20 * time.Millisecond)
	}
	for range more {
		if err := pub.Send(zmq4.NewMsgFrom([]byte("kv@w"), SeqFrame(seq), payload(seq))); err != nil {
			t.Fatal(err)
		}
		seq++
	}
	last := seq - 1
	waitFor(t, 10*time.Second, "the last batch", func() bool {
		recs := sink.kv()
		return len(recs) > 0 && recs[len(recs)-1].GetSource().GetSeq() == last
	})
	recs := sink.kv()
	if recs[0].GetEvents()[0].GetSourceReset().GetReason() != pb.SourceReset_REASON_FIRST_CONTACT {
		t.Fatalf("first record is no first-contact reset: %v", summary(recs))
	}
	resets := 1
	// A slow joiner misses the first seqs; without a replay socket they
	// are a loss, written as a second reset.
	if recs[1].GetEvents()[0].GetSourceReset().GetReason() == pb.SourceReset_REASON_UNRECOVERABLE_GAP {
		resets = 2
	}
	first := recs[resets].GetSource().GetSeq()
	if (first > 0) != (resets == 2) {
		t.Fatalf("first batch %d after %d resets: %v", first, resets, summary(recs))
	}
	for i, r := range recs[resets:] {
		want := first + uint64(i)
		if r.GetSource().GetSeq() != want || r.GetEvents()[0].GetSourceReset() != nil || !bytes.Equal(r.GetRaw().GetPayload(), payload(want)) {
			t.Fatalf("record %d is not batch %d: %v", i+resets, want, summary(recs))
		}
	}
	if got := uint64(len(recs) - resets); got != last-first+1 {
		t.Fatalf("%d batches after the resets, want %d", got, last-first+1)
	}
}

// TestZMQGoZeromqPeers: ingest's SUB (go-zeromq connections read through a
// buffer, subconn.go) against go-zeromq PUB sockets, in connect mode and in
// bind mode over tcp and ipc.
func TestZMQGoZeromqPeers(t *testing.T) {
	t.Run("connect", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		pub := zmq4.NewPub(ctx, zmq4.WithLogger(ZMQLogger(nil)))
		defer pub.Close()
		if err := pub.Listen("tcp://127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		sink := &memSink{}
		runIngest(t, Config{Sources: []SourceConfig{{WorkerID: "w", Endpoint: "tcp://" + pub.Addr().String(), Topic: "kv@"}}}, Deps{Sink: sink})
		pumpGoPub(t, pub, sink, 500)
	})
	for _, bind := range []string{"tcp://127.0.0.1:0", "ipc://" + filepath.Join(t.TempDir(), "ingest.sock")} {
		t.Run("bind-"+bind[:3], func(t *testing.T) {
			sink := &memSink{}
			ready := make(chan string, 1)
			runIngest(t, Config{Bind: bind, BindTopic: "kv@", Sources: []SourceConfig{{WorkerID: "w", Topic: "kv@w"}}},
				Deps{Sink: sink, BindReady: func(a string) { ready <- a }})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			pub := zmq4.NewPub(ctx, zmq4.WithLogger(ZMQLogger(nil)))
			defer pub.Close()
			if err := pub.Dial(<-ready); err != nil {
				t.Fatal(err)
			}
			pumpGoPub(t, pub, sink, 500)
		})
	}
}
