package devbroker_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pdrouter/pdrouter/kafkaconn/devbroker"
)

// TestLogSurvivesRestart: what the dev broker acknowledged is there again
// after it is closed and started on the same folder.
func TestLogSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := devbroker.Start(dir)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 1, nil, "t"); err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "t", Value: []byte("kept")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	cl.Close()
	b.Close()

	b, err = devbroker.Start(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	cl, err = kgo.NewClient(kgo.SeedBrokers(b.Addrs()...), kgo.ConsumeTopics("t"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	fs := cl.PollFetches(ctx)
	if err := fs.Err0(); err != nil {
		t.Fatal(err)
	}
	recs := fs.Records()
	if len(recs) != 1 || string(recs[0].Value) != "kept" {
		t.Fatalf("after restart read %d records", len(recs))
	}
}

func TestTakenPortIsAClearError(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	_, err = devbroker.Start(t.TempDir(), devbroker.Port(port))
	if err == nil || !strings.Contains(err.Error(), "already in use") || !strings.Contains(err.Error(), "--kafka-port") {
		t.Fatalf("error %v should say the port is in use and how to pick another", err)
	}
	if _, err := devbroker.Start(t.TempDir(), devbroker.Port(70000)); err == nil {
		t.Fatal("port 70000 accepted")
	}
}
