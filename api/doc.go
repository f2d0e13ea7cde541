// Package api is pdrouter's HTTP service (Gin): routing decisions, request
// lifecycle events, HTTP ingest of workers, KV events and load, and the
// operational endpoints. The contract is docs/api.md; /openapi.json
// describes it and a test checks real responses against that document.
//
// The API holds no state of its own. It reads the replica's materialized
// state through the State interface, asks the pure decider, and makes every
// answered decision durable on the decisions topic before it answers
// (design.md invariant 5): a decision that could not be appended is never
// returned; the caller gets 503 with Retry-After instead.
package api
