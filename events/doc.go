// Package events owns pdrouter's event log: the five logical topics, their
// record keys, and the versioned Protobuf schemas of their values.
//
// Every part of pdrouter that writes or reads Kafka goes through this package,
// so there is exactly one place that knows how a record is framed:
//
//   - the value is a Protobuf message of package pdrouter.events.v1
//     (events/proto), encoded with deterministic field order;
//   - the header "pdr-schema" names the message's full Protobuf name, for
//     example "pdrouter.events.v1.KvEventRecord", so tools outside this
//     codebase can pick the right descriptor without guessing;
//   - a tombstone (nil value) on the compacted workers topic deregisters a
//     worker and carries no header.
//
// Decoding never panics and never guesses: a record that cannot be decoded
// yields a *DecodeError naming topic, partition and offset, and the caller
// counts it and moves on. See SCHEMA.md for the evolution rule.
package events
