package ingest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
)

// TestBindRefusesUnregisteredTopics: on the bound SUB, any peer can send
// any topic. A topic that no registration names, or a data-parallel rank
// past the registered dp_size, must not become a source (a goroutine, a
// queue, records under a worker id the peer chose); the registered worker's
// messages still flow.
func TestBindRefusesUnregisteredTopics(t *testing.T) {
	sink := &memSink{}
	ready := make(chan string, 1)
	ing, _ := runIngest(t, Config{Bind: "tcp://127.0.0.1:0", Sources: []SourceConfig{{WorkerID: "w", Topic: "kv@w", DPSize: 2}}},
		Deps{Sink: sink, BindReady: func(a string) { ready <- a }})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pub := zmq4.NewPub(ctx, zmq4.WithLogger(ZMQLogger(nil)))
	defer pub.Close()
	if err := pub.Dial(<-ready); err != nil {
		t.Fatal(err)
	}
	send := func(topic string, seq uint64, rank int) {
		p := mp(t, []any{1.0, []any{[]any{"BlockRemoved", []any{seq + 1000}}}, rank})
		if err := pub.Send(zmq4.NewMsgFrom([]byte(topic), SeqFrame(seq), p)); err != nil {
			t.Fatal(err)
		}
	}
	var seq uint64
	waitFor(t, 10*time.Second, "the registered worker's first record", func() bool {
		send("kv@w", seq, 1)
		seq++
		time.Sleep(20 * time.Millisecond)
		return len(sink.kv()) > 0
	})
	for i := range 50 {
		send(fmt.Sprintf("stranger-%d", i), uint64(i), 0)
		send("kv@w", uint64(i), 7) // rank 7 of a worker registered with 2
	}
	send("kv@w", seq, 1)
	waitFor(t, 10*time.Second, "the registered worker's last record", func() bool {
		for _, r := range sink.kv() {
			if r.GetWorker().GetWorkerId() == "w" && r.GetWorker().GetDpRank() == 1 && r.GetSource().GetSeq() == seq && r.GetSource().Seq != nil {
				return true
			}
		}
		return false
	})
	for _, r := range sink.kv() {
		if w := r.GetWorker(); w.GetWorkerId() != "w" || w.GetDpRank() != 1 {
			t.Fatalf("a record for %s rank %d, which no registration names", w.GetWorkerId(), w.GetDpRank())
		}
	}
	if got := ing.Metrics().Rejects.Value("zmq_bind", "unknown_worker"); got != 100 {
		t.Errorf("refusals counted: %v, want 100", got)
	}
}
