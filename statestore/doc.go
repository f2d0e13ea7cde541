// Package statestore is a router replica's materialized state: the fleet's
// prefix caches, worker registry, load samples and active-request accounting,
// reduced from the topics of the event log into a per-replica Pebble
// store with an in-memory index in front of it.
//
// Design invariants (design.md) and where they are kept:
//
//  1. Deterministic: the state is a pure function of the offset vector. No
//     apply rule reads the wall clock (time is the max event time seen,
//     state.observe), iterates a Go map in an order that reaches state or output,
//     or uses randomness. The digest (digest.go) is computed over Pebble's
//     sorted keyspace, whose content is canonical: worker ids, never the
//     dense in-memory slots, appear in keys and values.
//  2. Exactly-once materialization: Store.Apply writes every state change of
//     a batch of records and the batch's new offsets into ONE Pebble batch
//     (apply.go). Apply rules are idempotent anyway (prefix.go), because
//     engines re-announce blocks.
//  3. Rebuildable: the in-memory index is derived only from Pebble at Open
//     (rebuild.go), and Pebble only from the log, so deleting the store and
//     replaying gives the same digest. One exception: the hash chains of the
//     requests in flight are not stored; Open reads them back from the
//     records the stored entries name (chains.go).
//  4. Bounded bootstrap: snapshots are Pebble checkpoints that carry their
//     offsets (snapshot.go); Materializer.Ready gates on lag (lag.go).
//  7. No I/O on the hot path: View answers from memory only (view.go).
//
// Besides the fleet's caches, the state holds (each file says its rule):
//
//   - decision records by decision and request id, kept DecisionRetention
//     after their event time, for idempotent routing and GET
//     /v1/decisions (decisions.go): in Pebble and the digest, with this
//     replica's own decisions visible at once, in memory only;
//   - approximate mode's predicted cache entries, derived from the
//     decisions of the last ApproximateTTL (approx.go);
//   - the KV-event health of decode workers, which makes "load but no KV
//     events" loud (kvhealth.go).
//
// WaitApplied (wait.go) blocks a reader until given offsets are applied,
// woken by each applied chunk.
//
// Bounded by the log, never by what a record declares (skip.go): a
// registration's dp_size bounds its ranks, --max-workers the registered
// ids, and records the state refuses are skipped and counted by reason.
//
// Memory layout: worker (id, dp rank) pairs get dense slots, created for
// ranks something was applied for and freed (for reuse) when a tombstone or
// a smaller dp_size purges them; the hot index
// maps a router block hash to its holders, inline for one or two holders and
// a tier-split bitset over slots beyond that (hotindex.go). Its entries sit
// in an arena in chain order (hottable.go: blocks stored together stay
// together, the rebuild at Open lays the whole arena out by parent links),
// so MatchPrefix walks a cached prefix by predicting each block's position
// from the one before instead of paying a random memory access per block.
// Figures (`pdrouter bench store`, 128 workers, 1M cached entries, 1,000-
// block query): p99 8-13 µs after a rebuild, p50 ~6 µs; on the store that
// applied the events (arena in arrival order, 16-block events interleaved
// across workers) p50 8-11 µs, p99 18-36 µs (compactions compete for the
// CPU right after the apply). The metric
// pdrouter_statestore_prefix_walk_blocks_total shows how far the arena has
// drifted from chain order. Each slot keeps
// its engine hash → router hash table in a compact open-addressing table
// (table.go) to resolve parents and removals. Active accounting keeps the
// chains of the requests in flight in a path-compressed trie whose nodes
// know their holder slots and refcounts (activeidx.go), in memory only;
// the entries keep their chains in memory too (chains.go).
package statestore
