package events

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	pb "github.com/pdrouter/pdrouter/events/eventspb"
)

// HeaderSchema is the record header that names the value's Protobuf message.
const HeaderSchema = "pdr-schema"

// MaxValueBytes bounds a record value this build will decode. Kafka's default
// max.message.bytes is about 1 MiB; the margin lets operators raise it for
// very long prompts, while a hostile multi-gigabyte value is refused before
// any allocation.
const MaxValueBytes = 16 << 20

// schemas lists, per topic, every message name this build can decode. A new
// schema version is added here next to the old one, never in its place: old
// records stay readable forever (SCHEMA.md).
var schemas = map[Topic][]protoreflect.FullName{
	TopicKvEvents:   {(&pb.KvEventRecord{}).ProtoReflect().Descriptor().FullName()},
	TopicLoad:       {(&pb.LoadSample{}).ProtoReflect().Descriptor().FullName()},
	TopicWorkers:    {(&pb.WorkerRegistration{}).ProtoReflect().Descriptor().FullName()},
	TopicDecisions:  {(&pb.DecisionRecord{}).ProtoReflect().Descriptor().FullName()},
	TopicOutcomes:   {(&pb.OutcomeEvent{}).ProtoReflect().Descriptor().FullName()},
	TopicLoadDeltas: {loadDeltaName},
	TopicLoadShares: {loadSharesName},
	TopicForwards:   {(&pb.ForwardedEvent{}).ProtoReflect().Descriptor().FullName()},
}

// sideSchemas lists, per topic, the other messages a topic carries next to
// its main one: a worker's health transitions ride on the load topic, in
// the partition and order of its load samples (SCHEMA.md). They evolve by
// the same rule as the main schemas.
var sideSchemas = map[Topic][]protoreflect.FullName{
	TopicLoad: {workerHealthName},
}

var (
	workerHealthName = (&pb.WorkerHealth{}).ProtoReflect().Descriptor().FullName()
	loadDeltaName    = (&pb.LoadDelta{}).ProtoReflect().Descriptor().FullName()
	loadSharesName   = (&pb.LoadShares{}).ProtoReflect().Descriptor().FullName()
)

// newMessage returns an empty message for a schema name, or nil.
func newMessage(name protoreflect.FullName) proto.Message {
	switch name {
	case "pdrouter.events.v1.KvEventRecord":
		return &pb.KvEventRecord{}
	case "pdrouter.events.v1.LoadSample":
		return &pb.LoadSample{}
	case "pdrouter.events.v1.WorkerRegistration":
		return &pb.WorkerRegistration{}
	case "pdrouter.events.v1.DecisionRecord":
		return &pb.DecisionRecord{}
	case "pdrouter.events.v1.OutcomeEvent":
		return &pb.OutcomeEvent{}
	case "pdrouter.events.v1.LoadDelta":
		return &pb.LoadDelta{}
	case "pdrouter.events.v1.LoadShares":
		return &pb.LoadShares{}
	case "pdrouter.events.v1.WorkerHealth":
		return &pb.WorkerHealth{}
	case "pdrouter.events.v1.ForwardedEvent":
		return &pb.ForwardedEvent{}
	}
	return nil
}

// SchemaOf returns the main schema name this build writes for a topic
// (SideSchemas lists the others).
func SchemaOf(t Topic) string {
	s := schemas[t]
	return string(s[len(s)-1])
}

// SideSchemas returns the names of the other messages a topic carries.
func SideSchemas(t Topic) []string {
	out := make([]string, len(sideSchemas[t]))
	for i, n := range sideSchemas[t] {
		out[i] = string(n)
	}
	return out
}

// TopicOf returns the topic a message type belongs to.
func TopicOf(m proto.Message) (Topic, error) {
	name := m.ProtoReflect().Descriptor().FullName()
	for _, t := range AllTopics {
		if accepts(t, name) {
			return t, nil
		}
	}
	return "", fmt.Errorf("events: %s is not the value of any topic", name)
}

var marshal = proto.MarshalOptions{Deterministic: true}

var decisionRecordName = (&pb.DecisionRecord{}).ProtoReflect().Descriptor().FullName()

// Marshal encodes a message with deterministic field order, so a replay
// that re-encodes a record produces the same bytes. Decision records take
// the hand-written encoder (decisionwire.go), which yields the same bytes.
func Marshal(m proto.Message) ([]byte, error) {
	if d, ok := m.(*pb.DecisionRecord); ok {
		if b, ok := appendDecision(make([]byte, 0, decisionSizeHint(d)), d, wholeDecision); ok {
			return b, nil
		}
	}
	return marshal.Marshal(m)
}

// NewRecord frames a message as a Kafka record for its topic under names,
// keyed by key. It validates the message first, with the rule every reader
// applies (ValidateAt, against the record's timestamp, which it sets to
// now): nothing a replica would skip is written.
func NewRecord(names Names, key []byte, m proto.Message) (*kgo.Record, error) {
	t, err := TopicOf(m)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	var v []byte
	switch d := m.(type) {
	case *pb.LoadDelta:
		// A delta's rules read its key (every entry names it).
		if v, err = MarshalLoadDelta(d, string(key)); err != nil {
			return nil, fmt.Errorf("events: refusing to write an invalid %s record: %w", t, err)
		}
	case *pb.LoadShares:
		// So do a snapshot's (the key is its writer).
		if v, err = MarshalLoadShares(d, string(key)); err != nil {
			return nil, fmt.Errorf("events: refusing to write an invalid %s record: %w", t, err)
		}
	default:
		if err := ValidateAt(m, now); err != nil {
			return nil, fmt.Errorf("events: refusing to write an invalid %s record: %w", t, err)
		}
		if v, err = Marshal(m); err != nil {
			return nil, fmt.Errorf("events: encode %s: %w", t, err)
		}
	}
	if len(v) > MaxValueBytes {
		return nil, fmt.Errorf("events: %s record is %d bytes, over the %d-byte limit", t, len(v), MaxValueBytes)
	}
	return &kgo.Record{
		Topic:     names.Physical(t),
		Key:       key,
		Value:     v,
		Headers:   []kgo.RecordHeader{{Key: HeaderSchema, Value: []byte(m.ProtoReflect().Descriptor().FullName())}},
		Timestamp: now,
	}, nil
}

// NewTombstone frames the deregistration of a worker on the workers topic.
func NewTombstone(names Names, workerID string) *kgo.Record {
	return &kgo.Record{Topic: names.Physical(TopicWorkers), Key: WorkerKey(workerID)}
}

// Envelope is a decoded record.
type Envelope struct {
	Topic     Topic
	Partition int32
	Offset    int64
	Key       []byte
	// Schema is the value's message name; empty for a tombstone.
	Schema string
	// Message is the decoded value; nil for a tombstone.
	Message proto.Message
	// Partial: Message is a DecisionRecord decoded by DecodeForApply, which
	// holds only what the apply rules read (UnmarshalDecisionForApply), and
	// Header is the record's header, encoded.
	Partial bool
	Header  []byte
}

// Tombstone reports whether the record deregisters a worker.
func (e *Envelope) Tombstone() bool { return e.Message == nil }

// Decode decodes one record read from a topic under names. Every failure is
// a *DecodeError that names where the record sits, so an operator can find
// it with `pdrouter log tail --from-offset`.
func Decode(names Names, r *kgo.Record) (*Envelope, error) {
	return decode(names, r, nil)
}

// DecodeForApply is Decode for a replica that applies the record to its
// state and keeps no more of it than its header: a DecisionRecord is
// decoded by UnmarshalDecisionForApply (keepChains as there), only as far
// as the apply rules read it, and its Envelope is Partial, with the
// record's header as bytes. It accepts every record Decode accepts, and
// refuses the others but for a decision whose malformed part is in rows or
// chains the apply rules do not read (UnmarshalDecisionForApply says why).
func DecodeForApply(names Names, r *kgo.Record, keepChains bool) (*Envelope, error) {
	return decode(names, r, func(v []byte) (*pb.DecisionRecord, []byte, error) { return UnmarshalDecisionForApply(v, keepChains) })
}

func decode(names Names, r *kgo.Record, decision func([]byte) (*pb.DecisionRecord, []byte, error)) (*Envelope, error) {
	t, ok := names.Logical(r.Topic)
	if !ok {
		return nil, &DecodeError{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Kind: ErrWrongTopic,
			Err: fmt.Errorf("topic is not one of pdrouter's under prefix %q", names.Prefix)}
	}
	env := &Envelope{Topic: t, Partition: r.Partition, Offset: r.Offset, Key: r.Key}
	fail := func(kind error, schema string, err error) (*Envelope, error) {
		return nil, &DecodeError{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Kind: kind, Schema: schema, Err: err}
	}
	var schema []byte
	found := false
	for _, h := range r.Headers {
		if h.Key == HeaderSchema {
			schema, found = h.Value, true
		}
	}
	if r.Value == nil && !found {
		if t != TopicWorkers {
			return fail(ErrUnexpectedTombstone, "", errors.New("null value: only the workers topic takes tombstones"))
		}
		if len(r.Key) == 0 {
			return fail(ErrInvalid, "", errors.New("tombstone without a worker id key"))
		}
		return env, nil
	}
	if !found {
		return fail(ErrMissingSchema, "", fmt.Errorf("no %q header", HeaderSchema))
	}
	name := protoreflect.FullName(schema)
	if !accepts(t, name) {
		if newMessage(name) != nil {
			return fail(ErrWrongTopic, string(schema), fmt.Errorf("a %s belongs on another topic", name))
		}
		return fail(ErrUnknownSchema, string(schema), fmt.Errorf("this build reads %s", schemaList(t)))
	}
	if len(r.Value) > MaxValueBytes {
		return fail(ErrTooLarge, string(schema), fmt.Errorf("value is %d bytes, over the %d-byte limit", len(r.Value), MaxValueBytes))
	}
	var m proto.Message
	if name == loadDeltaName || name == loadSharesName {
		// Decoded and validated whole by their own rules, which read the
		// key and keep their own bounds and reasons (loaddelta.go,
		// loadshares.go).
		var m proto.Message
		var err error
		if name == loadDeltaName {
			m, err = DecodeLoadDelta(r.Key, r.Value, r.Timestamp)
		} else {
			m, err = DecodeLoadShares(r.Key, r.Value, r.Timestamp)
		}
		if err != nil {
			kind := ErrInvalid
			switch ValidationReason(err) {
			case ReasonDeltaMalformed, ReasonSharesMalformed:
				kind = ErrMalformed
			case ReasonDeltaTooLarge, ReasonSharesTooLarge:
				kind = ErrTooLarge
			}
			return fail(kind, string(schema), err)
		}
		env.Schema, env.Message = string(schema), m
		return env, nil
	}
	if decision != nil && name == decisionRecordName {
		d, header, err := decision(r.Value)
		if err != nil {
			return fail(ErrMalformed, string(schema), err)
		}
		m, env.Partial, env.Header = d, true, header
	} else {
		m = newMessage(name)
		if err := proto.Unmarshal(r.Value, m); err != nil {
			return fail(ErrMalformed, string(schema), err)
		}
	}
	if err := ValidateAt(m, r.Timestamp); err != nil {
		return fail(ErrInvalid, string(schema), err)
	}
	env.Schema, env.Message = string(schema), m
	return env, nil
}

func accepts(t Topic, name protoreflect.FullName) bool {
	return slices.Contains(schemas[t], name) || slices.Contains(sideSchemas[t], name)
}

func schemaList(t Topic) string {
	s := ""
	for i, n := range slices.Concat(schemas[t], sideSchemas[t]) {
		if i > 0 {
			s += ", "
		}
		s += string(n)
	}
	return s
}
