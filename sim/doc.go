// Package sim is pdrouter's fleet simulator: engines that behave like vLLM workers
// on a simulated clock, the workloads that drive them, and a driver that routes every
// request through a router (the live HTTP API, or the decider in-process) and reports
// what users would have seen.
//
// Why it exists: no GPU is needed to see conditional disaggregation work, to compare
// policies on real traffic (the Mooncake trace), or to drive ingest and the router
// through the real wire formats. So the simulator is faithful where the router can
// observe it, and a documented model everywhere else:
//
//   - Observable, exact: live engines serve vLLM's OpenAI-compatible API
//     (/v1/completions, /v1/chat/completions, streamed or not, /tokenize,
//     /v1/models, /health) and NixlConnector's prefill/decode exchange through
//     kv_transfer_params, as vLLM's own proxy drives it
//     (tests/v1/kv_connector/nixl_integration/toy_proxy_server.py, vllm-project/vllm
//     commit 030ea52effcb05071543c8c42b8f0145e94cee43). KV events are vLLM's ZMQ bytes (three frames, 8-byte big-endian
//     seq, msgpack batch [ts, events, dp_rank], map or positional events, a replay
//     ROUTER socket), and /metrics uses vLLM's metric names. Prefix caching follows
//     vLLM's semantics: only full blocks are cached and announced (BlockStored), an
//     evicted block is announced (BlockRemoved) when its memory is reused, a reset is
//     AllBlocksCleared, and the free queue evicts least recently freed blocks first.
//   - Modelled, documented: step times (timing.go, hardware.go), admission and
//     chunked-prefill scheduling (engine.go), KV transfer (bytes per token ÷
//     bandwidth, serialized per receiving worker), and an optional host-memory (CPU)
//     KV tier as vLLM's OffloadingConnector keeps one (hosttier.go): write-through,
//     LRU, events of medium CPU, prefixes loaded at the host link's bandwidth
//     instead of recomputed. With no tier (the default) nothing of it runs.
//
// Files, one concern each:
//
//	hardware.go   published constants of the default model and GPU, with sources
//	timing.go     the step-time model built from them
//	eventq.go     the discrete-event clock (deterministic ordering)
//	blockpool.go  the KV block pool: prefix cache, LRU free queue, KV events
//	hosttier.go   the optional CPU KV tier: write-through store, LRU, CPU events
//	engine.go     one engine: waiting queue, running batch, chunked prefill, roles
//	wire.go       vLLM's msgpack encoding of KV event batches (map and positional)
//	publisher.go  the ZMQ PUB socket, seq numbers and the replay ROUTER
//	metrics.go    the engine's /metrics in Prometheus text format
//	request.go    a request of a workload, its deterministic token ids, cuts and spreads
//	mooncake.go   the Mooncake FAST'25 JSONL trace loader
//	synthetic.go  the synthetic multi-turn and agentic workload generator
//	router.go     the Router interface the driver routes through
//	localrouter.go the in-process decider and its exact view of the fleet (offline)
//	replicas.go   that router as N replicas that see each other's accounting late
//	httprouter.go the HTTP client of pdrouter's API (live)
//	fleet.go      the driver: arrivals, decisions obeyed, transfers, lifecycle
//	report.go     the report: TTFT, ITL, goodput, shares, reasons, cache hits
//	compare.go    the offline policy comparison
//	comparesweep.go the comparison at several load levels and SLO sets: tables and series
//	sloset.go     SLO sets (--slo) and goodput scored again under another SLO
//	plan.go       RunPlan: every split of a GPU count × policy × load, run in parallel
//	planrank.go   the plan's ranking, tie rule, recommendation and router flags
//	plantext.go   the plan's table and terminal bars
//	planchart.go  the plan's SVG chart
//	chart.go      SVG charts: compare's CDFs and goodput bars, goodput lines (load, shape)
//	run.go        RunFleet: live engines on real sockets against a router URL
//	live.go       the live loop: wall-clock pacing, HTTP work injected into the loop
//	external.go   what an engine does with an HTTP request: local, prefill leg, decode leg
//	engineserver.go an engine's HTTP listener: the OpenAI API and /metrics
//	genwriter.go  OpenAI answers: JSON, SSE chunks, usage, errors
//	openai.go     parsing and bounding the API's request bodies
//	tokenizer.go  the deterministic, prefix-stable tokenizer and chat template
//	viaopenai.go  RunViaOpenAI: a workload replayed by a streaming OpenAI client
//
// Determinism: the offline fleet is a pure function of (config, workload, seed); it
// has no live loop, so nothing outside its inputs can reach it. The
// event queue orders simultaneous events by insertion sequence, maps are never
// iterated where order matters, and the report reads only simulated time. In live mode
// the router's view lags the engines by real time, HTTP requests arrive when they
// arrive, and a stall of the machine is a stall of the simulated clock scaled by the
// time scale, so results vary run to run.
package sim
