// Package ingest reads the KV-cache events and the load of serving engines
// (vLLM, SGLang, TensorRT-LLM) and writes them, normalized, to pdrouter's
// event log: KvEventRecord on `kv-events`, LoadSample on `load`, and updated
// WorkerRegistration values on `workers`.
//
// Engines will not change for us, so everything here is driven by what the
// engines really put on the wire (docs/kv-event-formats.md), and by
// one bar: a lost or stale event means wrong routing, silently, so nothing
// may be dropped without a trace and nothing invalid may reach Kafka.
//
// The package is layered so each layer can be tested alone:
//
//   - decode.go, msgpack.go, hash.go, tier.go: pure msgpack decoding of one
//     engine batch into events (no I/O). Shape-driven: array vs map, length,
//     key names.
//   - frames.go, endpoint.go: the ZMQ framing (live and replay) and endpoint
//     arithmetic (bind vs connect, data-parallel port offsets).
//   - sequence.go: the per-source sequence state machine (gaps, restarts).
//   - zmtp.go, zmtp_conn.go, zmtp_limits.go, zmtp_guard.go: ingest's own
//     ZMTP 3 (greeting, NULL handshake, framing, PING) for tcp:// and ipc://
//     peers, with bounded sizes, a handshake timeout, a cap on connections
//     to --bind, refusals counted in pdrouter_rejected_total{entry=zmq_bind
//     or zmq_dial}, and a recover per connection. Whoever can reach the
//     bound port or register an endpoint is its peer, so nothing a peer
//     sends may panic, allocate what it declares, or stall ingest.
//   - zmq.go, subconn.go, replay.go: the SUB loops (dial and bind) and the
//     replay DEALER over those connections; inproc:// endpoints, reachable
//     only from this process, keep go-zeromq's sockets.
//   - source.go: one goroutine per source that ties frames, decoding,
//     sequencing and replay together and hands records to a Sink.
//   - sink.go, split.go, refused.go: the Kafka producer (idempotent,
//     acks=all, backpressure); engine batches bigger than a record split
//     across records; records the broker refuses dropped and repaired by
//     a reset of their worker.
//   - allow.go: --engine-allow, where registrations may make ingest
//     connect.
//   - scrape.go, load.go: Prometheus /metrics scraping into LoadSample and
//     registration updates.
//   - workers.go: the `workers` topic as a source of endpoints.
//   - run.go: Run, the entry point of `pdrouter ingest` (and of `dev` and
//     `serve --ingest`).
//
// # Decisions
//
// Semantically invalid events are demoted, not dropped and not forwarded: a
// BlockStored whose token count is not len(block_hashes)*block_size (or
// with no hashes, a block size outside [1, events.MaxBlockSize], a token id
// that does not fit 32 bits), or a BlockRemoved without hashes, becomes an
// UnknownEvent carrying the engine's tag. events.Validate would refuse the
// whole record otherwise, and the other events of the batch are good. The
// demotion is counted (pdrouter_ingest_events_demoted_total{reason}) and
// the raw payload stays in the record. The cost is that the state misses a
// stored block, which under-credits a cache hit but never invents one.
//
// The exception is an offload store: vLLM's OffloadingConnector announces
// the blocks it copies to CPU as a BlockStored of medium CPU with no tokens
// and no parent, naming them by their GPU hashes. Such an event (a host or
// disk tier without tokens, events.IsOffloadStore) is forwarded, since the
// state resolves its hashes through the worker's engine table; ingest keeps
// no table of its own, and a GPU store without tokens is still demoted.
//
// A batch that cannot be decoded at all (not msgpack, wrong types) is not
// silently skipped either: its raw bytes are written in a record whose only
// event is a SourceReset (REASON_UNRECOVERABLE_GAP), because the events in
// it are lost for the state, and a replica that keeps the worker's blocks
// after missing a removal would route to a cache that is gone.
//
// Tiers: GPU is TIER_DEVICE; CPU and CPU_PINNED are TIER_HOST; DISK,
// STORAGE, FS, OBJ, SHARED_STORAGE and EXTERNAL are TIER_DISK. An event
// without a medium (engines before the field existed) is TIER_DEVICE: only
// the engine's own GPU prefix cache published then. An unknown medium string
// is TIER_DISK: the block is cached somewhere we cannot name, and crediting
// it as the slowest tier may under-credit a hit but never over-credits one.
// The raw string is always kept in `medium`.
//
// Sources: a source is one publisher process, i.e. one engine data-parallel
// rank. In connect mode it is identified by the endpoint ingest dialed; in
// bind mode (engines connect to one SUB that ingest binds) by the ZMQ topic
// frame and the batch's data-parallel rank, so engines that share a bind
// endpoint must use distinct topics (llm-d's convention kv@<pod>@<model>
// does). Anyone who reaches the bind port can send any topic, so only
// topics a source or registration names are read (and ranks below its
// dp_size); the rest are dropped and counted.
//
// Everything ingest connects to is named by configuration or by a
// registration, so it is checked against --engine-allow (loopback and
// private ranges by default) on the addresses actually dialed.
//
// Sequence numbers restart at 0 when an engine restarts, and ingest keeps
// no position across its own restarts. Either way, the first message seen
// from a source, and any seq that goes backwards, produces a SourceReset
// record (REASON_FIRST_CONTACT, REASON_SEQUENCE_RESTART) and then a replay
// from seq 0 of the engine's buffer, so replicas drop what may be stale and
// rebuild what the engine still remembers. Only seqs that replay cannot
// return are a loss (REASON_UNRECOVERABLE_GAP): a first message at seq 0 is
// not one.
// Duplicates after that are harmless: applying events is idempotent.
//
// # Throughput
//
// `pdrouter bench ingest --brokers …` measures it (package ingestbench):
// one ingest process built as `pdrouter ingest` builds it, one engine
// publisher in its own process (the binary re-executed as the hidden
// `bench ingest-publisher`), the real broker, fresh topics; a run that lost
// an event fails instead of printing a figure. TestBenchZMQToKafka runs
// the same measurement with a pyzmq or an in-process publisher. On a
// shared 2-core machine (figures vary with its other load):
//
//	one-block events per ZMQ message    events/s     ingest CPU per event
//	1  (publisher "go")                 215k-322k    5.1-5.3 µs
//	32 (publisher "go")                 411k-554k    2.2-2.4 µs
//
// Those are TestBenchZMQToKafka's before ingestbench, with events of eight
// map keys and a queue of 4096. `bench ingest` sends vLLM ≥ v0.24's
// eleven keys (sim.EncodeBatch) with `pdrouter ingest`'s queue of 1024.
// On the machine with nothing else running it gave 315k and 303k
// events/s at one event per message (5.2-5.3 µs of ingest CPU per event,
// 1.6 cores) and 528k at 32 (2.65 µs); its first two runs, with other
// benchmarks loading the machine (load average 3.7-3.9), gave 168k and
// 141k at one event per message (0.8-0.9 cores: ingest waited for the
// CPU), 402k and 315k at 32.
//
// With a pyzmq publisher one Python process sends about 105k messages/s and
// ingest follows it at 0.6 cores. Most of the cost per message is decoding,
// the Protobuf record and franz-go's produce path; the socket reads are
// buffered (zmtp_conn.go), since go-zeromq's own reader, at five read
// syscalls a message, held ingest under 100k messages/s.
package ingest
