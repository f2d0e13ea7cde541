package events_test

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/pdrouter/pdrouter/events"
	"github.com/pdrouter/pdrouter/events/eventstest"
)

var addGolden = flag.Bool("add-golden", false, "write golden records that do not exist yet (never overwrites)")

// TestGoldenRecordsStayReadable is the evolution rule as a test: records
// written by earlier builds (testdata/golden/<schema version>/) must decode
// with this build, to the same message, forever. A golden file is never
// regenerated; a schema change that breaks one is a breaking change.
//
// The same files are decoded by tests/python with the stock Python protobuf
// runtime from the checked-in .proto files, which proves tools outside this
// codebase can read the log.
func TestGoldenRecordsStayReadable(t *testing.T) {
	dir := filepath.Join("testdata", "golden", "v1")
	if *addGolden {
		writeMissingGolden(t, dir)
	}
	entries, err := filepath.Glob(filepath.Join(dir, "*.binpb"))
	if err != nil || len(entries) < len(events.AllTopics) {
		t.Fatalf("want at least one golden record per topic in %s, found %d (%v)", dir, len(entries), err)
	}
	for _, bin := range entries {
		name := filepath.Base(bin[:len(bin)-len(".binpb")])
		t.Run(name, func(t *testing.T) {
			value, err := os.ReadFile(bin)
			if err != nil {
				t.Fatal(err)
			}
			want, err := os.ReadFile(bin[:len(bin)-len(".binpb")] + ".json")
			if err != nil {
				t.Fatal(err)
			}
			// "topic" holds the topic's main schema, "topic.Message" a side one.
			topicName, message, side := strings.Cut(name, ".")
			topic, err := events.ParseTopic(topicName)
			if err != nil {
				t.Fatal(err)
			}
			if !side {
				message = schemaMessage(topic)
			}
			env, err := events.Decode(names, &kgo.Record{
				Topic: names.Physical(topic), Value: value, Key: sampleKey(name),
				Headers: []kgo.RecordHeader{{Key: events.HeaderSchema, Value: []byte("pdrouter.events.v1." + message)}},
			})
			if err != nil {
				t.Fatalf("a record an earlier build wrote no longer decodes: %v", err)
			}
			wantMsg := proto.Clone(env.Message)
			proto.Reset(wantMsg)
			if err := protojson.Unmarshal(want, wantMsg); err != nil {
				t.Fatal(err)
			}
			if !proto.Equal(env.Message, wantMsg) {
				t.Fatalf("golden record decodes to\n%v\nwant\n%v", env.Message, wantMsg)
			}
		})
	}
}

func schemaMessage(t events.Topic) string {
	s := events.SchemaOf(t)
	return s[len("pdrouter.events.v1."):]
}

// sampleKey is the key of the sample a golden file was written from: the
// rules of load deltas and load shares read it. Golden files hold values
// only.
func sampleKey(name string) []byte {
	for _, s := range eventstest.All() {
		if s.Name == name {
			return s.Key
		}
	}
	return nil
}

func writeMissingGolden(t *testing.T, dir string) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, s := range append(eventstest.All(), eventstest.Side()...) {
		bin := filepath.Join(dir, s.Name+".binpb")
		if _, err := os.Stat(bin); err == nil {
			continue
		}
		v, err := events.Marshal(s.Msg)
		if err != nil {
			t.Fatal(err)
		}
		j, err := protojson.MarshalOptions{Multiline: true, UseProtoNames: true}.Marshal(s.Msg)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(bin, v, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, s.Name+".json"), append(j, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote golden %s", bin)
	}
}
