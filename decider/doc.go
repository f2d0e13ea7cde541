// Package decider makes pdrouter's routing decision for one request: which decode
// worker serves it, and whether its prompt is prefilled locally on that worker or
// remotely on a prefill worker (conditional disaggregation).
//
// The semantics are those of docs/conditional-disagg.md, to the letter; this
// summary points at the code that implements each step.
//
// # A pure function
//
// A decision is a pure function of (Config, Request, View): no I/O, no clock, no unseeded
// randomness, no dependence on map order or on the order in which the View lists
// workers, no package state. So a decision can be recomputed from its record and from
// replayed state, byte for byte (design.md, invariants 1 and 6). TestPurity enforces the
// rules that a reviewer could miss; the property tests check the order independence.
//
// # Inputs
//
// P is Request.PromptTokens. Block size is per worker, so the request carries one hash
// chain of complete blocks per block size (Request.Chains) and the View answers overlap
// and shared active blocks for a whole chain at once (PrefixIndex, ActiveAccounting).
// For the chosen decode worker d with block size B (credit.go):
//
//	C     = round((overlap + 0.75·host + 0.25·disk) × B)   complete blocks only, never rounded up to a block
//	eff   = P − min(C, P)
//	ratio = eff / max(P, 1)
//
// # Step 1: worker selection (cost.go, pick.go, softmax.go, eligibility.go)
//
// Candidates are the workers of the request's model in each pool; a worker marked
// Unhealthy (its latest health record on the log), Unavailable (the busy filter) or
// without a block size is not eligible. For each
// eligible worker:
//
//	raw_prefill_blocks = (active_prefill_tokens + P) / B
//	overlap_credit     = overlap_score_credit·overlap + 0.75·host + 0.25·disk
//	prefill_term       = prefill_load_scale·max(0, raw_prefill_blocks − overlap_credit)
//	cost               = B·(prefill_term + potential_decode_blocks)   (decode pool)
//	cost               = B·prefill_term                               (prefill pool)
//
// The cost is in tokens, not in the worker's blocks, so that workers of different block
// sizes (SGLang's page size 1 beside vLLM's 16) compare; decider version 1 compared
// blocks, and NewAt keeps it for recomputing its records (version.go).
//
// potential_decode_blocks = active decode blocks + ⌈P/B⌉ − blocks of this request already
// active on the worker. At temperature 0 the lowest cost wins and exact ties go to the
// lowest hash(request id, worker id) (tiebreak.go documents the hash). Above 0, a worker
// is drawn with probability softmax(−normalized cost / temperature), from a PCG seeded by
// the request id. In round-robin and random router modes the cost is ignored and the
// tie-break hash alone picks (rendezvous hashing), because a pure decider has no
// rotation counter.
//
// The prefill worker is chosen the same way among prefill workers, with no decode term.
//
// # Steps 2 and 3: policy and decode guard (mode.go, policy_*.go, guard.go)
//
// policy.go holds the policy table: each policy once, with its summary, the config keys
// its rule reads, its reason codes and its rule. Validation, the flag help, `sim
// compare`, `tune` and the OpenAPI enums derive their lists from it.
//
//   - No eligible prefill worker: local, aggregated_no_prefill_workers (even with the
//     feature off).
//   - Feature off: remote, conditional_disagg_disabled.
//   - isl_bounding: bypass iff eff < eff_isl_threshold and ratio < eff_isl_ratio_threshold
//     (strict); P == 0 always bypasses.
//   - prefill_load: bypass iff the prefill worker the router would pick is busy:
//     load-sample active_prefill_tokens > prefill_busy_threshold × max_num_batched_tokens,
//     with an unknown max_num_batched_tokens taken as 10,000,000 and a missing sample
//     counted as not busy. prefill_busy_threshold inherits --router-queue-threshold.
//   - isl_or_load: bypass iff either says so (a missing sample leaves the ISL condition).
//   - slo (policy_slo.go, latency.go; docs/slo-policy.md): predict TTFT and ITL of the
//     local path and of each prefill candidate with the latency model the view serves
//     (LatencyModel), and take the path with the best expected goodput under
//     slo_ttft_ms and slo_itl_ms, charging a local prefill what it costs the decode
//     worker's running requests; its own ITL guard; cold, isl_or_load with the decode
//     guard under its own reasons. It decides mode, reason and prefill worker itself (a
//     modeRule), since it may pick another prefill worker than the cost did.
//   - Guard, when decode_busy_threshold is set: a bypass is denied when
//     blocks(d) > decode_busy_threshold × total_kv_blocks(d), where blocks(d) is read from
//     decode_busy_source (router: potential decode blocks including this request;
//     worker: the load sample's kv_used_blocks; max: the larger). Unknown total_kv_blocks,
//     or source=worker without a sample, denies the bypass (..._unknown).
//
// The reason codes are the Reason constants. Decision also records each Check with both
// sides of its comparison, DecidedBy (the rule or threshold that settled the mode) and
// Distance (how far from flipping), for explain and what-if tooling.
//
// # Errors
//
// An impossible request is a *RequestError (ErrInvalidRequest). No eligible decode worker
// is a *NoWorkerError (ErrNoDecodeWorker) with counts of why: there is no fallback, since
// a prefill worker cannot decode, so the caller should answer "retry later" and record no
// decision.
//
// # Configuration
//
// Config holds the Dynamo-compatible settings; ParseDisaggConfig reads the JSON of
// --router-conditional-disagg-config (exact keys, ranges named in errors);
// Config.Validate checks ranges and the feature's requirements (KV mode, KV events);
// CheckPools checks for separate pools once the registry is known; Config.Hash is the
// version recorded in every decision. Package deciderflags binds the flags and their
// PDR_ environment variables; package memview is an in-memory View for tests and
// benchmarks.
//
// # Performance
//
// DecideInto reuses the caller's Decision and does not allocate in steady state; the
// benchmark (1,000-block request, 128 decode and 32 prefill workers) reports p50/p99.
package decider
