"""Writes openapi.json, the OpenAPI 3.0 document of pdrouter's HTTP API.

Run `python3 api/openapi/gen.py` (or `go generate ./api`) after changing an
endpoint or the decider's policy table; the Go test TestResponsesMatchOpenAPI
checks real responses against the output, and TestOpenAPIDocumentIsFresh checks
that the committed file is what this script writes.

The policy and reason enums are the decider's: they come from
`go run ./api/openapi/enums` (the Go toolchain named by $GO, default `go`), or
from a file of its output given with --enums.
"""
import argparse
import json
import os
import pathlib
import subprocess

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent

args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
args.add_argument("--out", type=pathlib.Path, default=HERE / "openapi.json", help="where to write the document")
args.add_argument("--enums", type=pathlib.Path, help="output of `go run ./api/openapi/enums` to read instead of running it")
args = args.parse_args()

if args.enums:
    ENUMS = json.loads(args.enums.read_text())
else:
    # Built as the release is (CGO_ENABLED=0, -trimpath): the program needs no
    # cgo, and `make test` (whose TestOpenAPIDocumentIsFresh runs this script)
    # compiles the release build in that configuration, so the run reuses its
    # packages instead of compiling a configuration of its own.
    ENUMS = json.loads(subprocess.run([os.environ.get("GO", "go"), "run", "-trimpath", "./api/openapi/enums"], cwd=ROOT,
                                      env={**os.environ, "CGO_ENABLED": "0"},
                                      check=True, capture_output=True, text=True).stdout)

def ref(name):
    return {"$ref": f"#/components/schemas/{name}"}

def obj(props, required=(), additional=False):
    o = {"type": "object", "properties": props, "additionalProperties": additional}
    if required:
        o["required"] = list(required)
    return o

I64 = {"type": "integer", "format": "int64"}
U64 = {"type": "integer", "format": "int64", "minimum": 0}
U32 = {"type": "integer", "format": "int32", "minimum": 0}
NUM = {"type": "number"}
STR = {"type": "string"}
BOOL = {"type": "boolean"}
OFFSETS = {"type": "object", "additionalProperties": {"type": "object", "additionalProperties": I64},
           "description": "topic → partition → offset (the next offset)"}
HASH = {"oneOf": [{"type": "integer", "format": "int64"}, {"type": "string"}],
        "description": "a 64-bit hash: a JSON number, a decimal string, or 0x hex"}

REASONS = ENUMS["reasons"]
POLICIES = ENUMS["policies"]

schemas = {
    "Error": obj({"error": obj({"code": STR, "message": STR, "field": STR}, ["code", "message"])}, ["error"]),
    "RouteTooLarge": obj({"error": obj({
        "code": {"type": "string", "enum": ["body_too_large", "too_many_tokens", "decision_record_too_large"],
                 "description": "decision_record_too_large: the decision's record stays over --decision-record-max-bytes even with its hash chains cut, so the decisions topic would refuse it on every try; not retryable"},
        "message": STR, "field": STR}, ["code", "message"])}, ["error"]),
    "Offsets": OFFSETS,
    "IngestAccepted": obj({"offsets": OFFSETS}, ["offsets"]),
    "LifecycleAccepted": obj({"offsets": OFFSETS, "forwarded": {
        "type": "boolean", "description": "true: this replica (of --load-deltas snapshots) holds no decision for the request and "
        "appended the event to the forwards topic, whose offset `offsets` names, for the replica that decided it to apply"}}, ["offsets"]),
    "RouteRequest": obj({
        "request_id": {"type": "string", "maxLength": 256, "description": "optional; the same id again returns the stored decision"},
        "model": {"type": "string", "description": "may be left out when one model is served"},
        "token_ids": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 4294967295}, "minItems": 1, "nullable": True},
        "block_hashes": {"type": "array", "items": HASH, "nullable": True},
        "block_size": {"type": "integer", "minimum": 1, "description": "tokens per block of block_hashes"},
        "prompt_tokens": {"type": "integer", "minimum": 0, "description": "required with block_hashes"},
        "lora_name": {"type": "string", "nullable": True},
        "expected_output_tokens": {"type": "integer", "minimum": 0, "nullable": True},
        "after": {**OFFSETS, "nullable": True, "description": "read-your-writes: wait until these offsets are applied (504 past the bound)"},
    }),
    "Candidate": obj({
        "worker": STR, "pool": {"type": "string", "enum": ["decode", "prefill", "unspecified"]}, "eligible": BOOL,
        "excluded": STR, "block_size": U32, "overlap_blocks": U32, "host_blocks": U32, "disk_blocks": U32,
        "active_prefill_tokens": I64, "raw_prefill_blocks": NUM, "overlap_credit": NUM, "prefill_term": NUM,
        "active_decode_blocks": I64, "request_blocks": I64, "shared_active_blocks": I64,
        "potential_decode_blocks": I64, "cost": NUM, "probability": NUM, "total_kv_blocks": I64,
        "max_num_batched_tokens": I64, "load_known": BOOL, "load_kv_used_blocks": I64, "picked": BOOL,
    }, ["worker", "pool", "overlap_blocks", "cost"]),
    "RouteResponse": obj({
        "request_id": STR, "decision_id": STR,
        "mode": {"type": "string", "enum": ["local", "remote"]},
        "decode_worker": STR, "prefill_worker": {"type": "string", "nullable": True},
        "reason": {"type": "string", "enum": REASONS},
        "policy": {"type": "string", "enum": POLICIES},
        "prompt_tokens": U32, "cached_tokens": U32, "effective_isl": U32, "effective_isl_ratio": NUM,
        "config_hash": STR, "watermark": OFFSETS,
        "decided_by": {"type": "string", "description": "the check that settled the mode"},
        "distance": {"type": "number", "description": "that check's value minus its limit"},
        "idempotent_replay": {"type": "boolean", "description": "true when an earlier decision for this request_id was returned"},
        "candidates": {"type": "array", "items": ref("Candidate"), "description": "with ?explain=true"},
    }, ["request_id", "decision_id", "mode", "decode_worker", "prefill_worker", "reason", "policy", "prompt_tokens",
        "cached_tokens", "effective_isl", "effective_isl_ratio", "config_hash", "watermark"]),
    "DecisionRecord": {"type": "object", "additionalProperties": True,
                       "description": "pdrouter.events.v1.DecisionRecord in the Protobuf JSON mapping (proto field names; 64-bit integers as strings)",
                       "required": ["decision_id", "request_id", "mode", "decode_worker"],
                       "properties": {"decision_id": STR, "request_id": STR, "mode": STR, "reason": STR,
                                      "decode_worker": {"type": "object", "additionalProperties": True}}},
    "RequestEvent": obj({
        "event": {"type": "string", "enum": ["prefill_done", "completed", "cancelled"]},
        "ttft_ms": {"type": "number", "minimum": 0}, "output_tokens": {"type": "integer", "minimum": 0},
        "itl_ms_mean": {"type": "number", "minimum": 0},
    }, ["event"]),
    "WorkerRegistration": obj({
        "worker_id": STR, "pool": {"type": "string", "enum": ["prefill", "decode"]}, "model": STR,
        "block_size": {"type": "integer", "minimum": 1}, "total_kv_blocks": {"type": "integer", "minimum": 0, "nullable": True},
        "max_num_batched_tokens": {"type": "integer", "minimum": 0, "nullable": True},
        "kv_events_endpoint": STR, "kv_replay_endpoint": STR, "kv_events_topic": STR, "metrics_url": STR, "http_url": STR,
        "dp_size": {"type": "integer", "minimum": 0}, "engine": {"type": "string", "enum": ["", "vllm", "sglang", "trtllm", "sim"]},
    }, ["worker_id", "pool", "model", "block_size"]),
    "KvEvent": obj({
        "type": {"type": "string", "enum": ["stored", "removed", "cleared"]},
        "block_hashes": {"type": "array", "items": HASH}, "parent_block_hash": {**HASH, "nullable": True},
        "token_ids": {"type": "array", "items": {"type": "integer", "minimum": 0}},
        "block_size": {"type": "integer", "minimum": 1}, "medium": {"type": "string", "nullable": True},
        "lora_name": {"type": "string", "nullable": True},
    }, ["type"]),
    "KvEvents": obj({"worker_id": STR, "dp_rank": {"type": "integer", "minimum": 0}, "ts": {"type": "number"},
                     "events": {"type": "array", "items": ref("KvEvent"), "minItems": 1}}, ["worker_id", "events"]),
    "LoadSample": obj({"worker_id": STR, "dp_rank": {"type": "integer", "minimum": 0}, "ts": {"type": "number"},
                       "num_requests_running": {"type": "integer", "minimum": 0}, "num_requests_waiting": {"type": "integer", "minimum": 0},
                       "kv_used_blocks": {"type": "integer", "minimum": 0}, "kv_total_blocks": {"type": "integer", "minimum": 0},
                       "active_prefill_tokens": {"type": "integer", "minimum": 0},
                       "kv_usage_ratio": {"type": "number", "minimum": 0, "maximum": 1}}, ["worker_id"]),
    "WorkerLoad": obj({"sample_time": {"type": "string", "format": "date-time"}, "age_seconds": NUM,
                       "num_requests_running": U64, "num_requests_waiting": U64, "kv_used_blocks": U64,
                       "kv_total_blocks": U64, "active_prefill_tokens": U64}, ["sample_time", "age_seconds"]),
    "WorkerStatus": obj({
        "worker_id": STR, "dp_rank": U32, "pool": STR, "model": STR, "block_size": {"type": "integer"},
        "total_kv_blocks": {**I64, "nullable": True}, "max_num_batched_tokens": {**I64, "nullable": True},
        "kv_events_endpoint": STR, "metrics_url": STR, "http_url": STR, "cached_blocks": I64, "active_decode_blocks": I64,
        "active_prefill_tokens": I64, "load": {"allOf": [ref("WorkerLoad")], "nullable": True},
        "kv_events_missing": BOOL, "kv_events_note": STR,
        "kv_events_block_size": {"type": "integer", "minimum": 0}, "kv_block_size_mismatch": BOOL,
        "kv_block_size_note": STR, "health": ref("WorkerHealth"),
    }, ["worker_id", "pool", "model", "block_size", "cached_blocks", "load", "kv_events_missing",
        "kv_events_block_size", "kv_block_size_mismatch", "health"]),
    "WorkerHealth": obj({
        "healthy": BOOL,
        "reason": {"type": "string", "enum": ["scrape_failed", "connect_refused", "zmq_down", "recovered"]},
        "source": {"type": "string", "enum": ["ingest_scrape", "ingest_zmq", "door"]},
        "observer": STR, "detail": STR, "observed_at": {"type": "string", "format": "date-time"},
        "since": obj({"topic": STR, "partition": {"type": "integer", "format": "int32", "minimum": 0}, "offset": I64},
                     ["topic", "partition", "offset"]),
    }, ["healthy"]),
    "Workers": obj({"workers": {"type": "array", "items": ref("WorkerStatus")}}, ["workers"]),
    "State": obj({"cell": {"type": "string", "description": "the share of the log the state holds, i/n (0/1: the whole log)"},
                  "applied": OFFSETS, "lag": OFFSETS, "total_lag": I64, "digest": STR,
                  "snapshot": {"type": "object", "nullable": True, "additionalProperties": True}},
                 ["cell", "applied", "lag", "total_lag", "digest", "snapshot"]),
    "Explanation": {"type": "object", "additionalProperties": True,
                    "description": "replay.Explanation: the pure recompute from the record, the candidate table, runner-up and margin, and the deciding rule",
                    "required": ["pure_check"],
                    "properties": {"pure_check": {"type": "object", "additionalProperties": True, "required": ["identical"],
                                                  "properties": {"identical": BOOL, "record_bytes_identical": BOOL,
                                                                 "config_hash_matches": BOOL, "error": STR,
                                                                 "differences": {"type": "array", "nullable": True, "items": {"type": "object", "additionalProperties": True}}}},
                                   "truncation": {"type": "object", "additionalProperties": True,
                                                  "description": "present when the record left candidate rows or hash-chain blocks out to stay within its size budget; notes say what the checks then cover",
                                                  "required": ["candidates_kept", "omitted_decode", "omitted_prefill", "omitted_eligible", "notes"],
                                                  "properties": {"candidates_kept": U32, "omitted_decode": U32, "omitted_prefill": U32, "omitted_eligible": U32,
                                                                 "chains": {"type": "array", "items": obj({"block_size": U32, "kept_blocks": U32, "total_blocks": U32},
                                                                                                           ["block_size", "kept_blocks", "total_blocks"])},
                                                                 "notes": {"type": "array", "items": STR}}}}},
    "Health": obj({"status": STR}, ["status"]),
    "Ready": obj({"status": STR, "total_lag": I64, "bound": I64, "error": {"type": "object", "additionalProperties": True}}),
}

def resp(desc, schema=None, content="application/json"):
    r = {"description": desc}
    if schema is not None:
        r["content"] = {content: {"schema": schema}}
    return r

ERR = ref("Error")
def errors(*codes, body=False):
    """Error answers of an operation. Every one can refuse headers over the
    limit (431); one that takes a body can also time out reading it (408)."""
    codes = set(codes) | {"431"} | ({"408"} if body else set())
    names = {"400": "malformed request", "401": "missing or wrong bearer token", "404": "unknown id",
             "408": "the body did not arrive within the read timeout (request_timeout)",
             "409": "conflict: the request_id was decided for another request (request_id_conflict)",
             "413": "too large",
             "421": "the worker or partition is in another cell than this replica's (wrong_cell; the message names the cell)",
             "431": "the request line and headers are over the limit (headers_too_large)", "415": "not JSON", "422": "well-formed but invalid",
             "503": "not ready, or the log cannot take more (Retry-After)", "504": "a wait bound ran out",
             "410": "the replica holds the decision, but the decisions topic no longer holds its record (its retention is shorter)",
             "500": "the decisions topic holds another record at the decision's position (see the router's log)"}
    return {c: resp(names[c], ERR) for c in sorted(codes)}

def op(summary, responses, body=None, params=None):
    o = {"summary": summary, "responses": responses}
    if body:
        o["requestBody"] = {"required": True, "content": {"application/json": {"schema": body}}}
    if params:
        o["parameters"] = params
    return o

ID = lambda name, desc: {"name": name, "in": "path", "required": True, "schema": {"type": "string"}, "description": desc}
INGEST_ERRS = errors("400", "401", "413", "415", "421", "422", "503", body=True)
DECISION_ID = ID("decision_id", "a decision id (a 26-character ULID): one the replica's state does not hold is searched for on the decisions topic around the time in the id")
DECISION_ERRS = errors("400", "401", "404", "410", "500", "503")
DECISION_SOURCE = {"X-Pdrouter-Decision-Source": {
    "description": "where the record came from: index (this replica's state) or log (a search of the decisions topic for a decision the state does not hold)",
    "schema": {"type": "string", "enum": ["index", "log"]}}}

doc = {
    "openapi": "3.0.3",
    "info": {"title": "pdrouter", "version": "1",
             "description": "Event-sourced router for disaggregated LLM serving. Errors are always {\"error\": {code, message, field}}, "
                            "with one exception: a request Go's HTTP server cannot parse (a malformed request line or header, "
                            "or a head far over the header limit) gets Go's plain-text 400 or 431 before the API sees it. "
                            "With a bearer token configured, an unknown path or method answers 401 before 404 or 405."},
    "components": {"schemas": schemas,
                   "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
    "paths": {
        "/v1/route": {"post": op("Decide where a request goes", {
            "200": resp("the decision (made durable on the decisions topic before answering)", ref("RouteResponse")),
            **errors("400", "401", "409", "410", "415", "421", "422", "500", "503", "504", body=True),
            "413": resp("too large: the body, the prompt, or the decision's record (not retryable: the same request fails the same way)", ref("RouteTooLarge"))},
            body=ref("RouteRequest"),
            params=[{"name": "explain", "in": "query", "schema": {"type": "string", "enum": ["true", "false"]},
                     "description": "include the candidate table"}])},
        "/v1/decisions/{decision_id}": {"get": op("A decision record, from the replica's state or the decisions topic", {
            "200": {**resp("the record", ref("DecisionRecord")), "headers": DECISION_SOURCE}, **DECISION_ERRS},
            params=[DECISION_ID])},
        "/v1/decisions/{decision_id}/explain": {"get": op("Replay explanation of a decision", {
            "200": {**resp("the explanation", ref("Explanation")), "headers": DECISION_SOURCE}, **DECISION_ERRS},
            params=[DECISION_ID])},
        "/v1/requests/{request_id}/events": {"post": op("A request lifecycle event (frees accounting)", {
            "202": resp("written, or forwarded to the replica that decided; the offsets it was written at", ref("LifecycleAccepted")),
            **errors("400", "401", "404", "413", "415", "421", "422", "503", body=True)},
            body=ref("RequestEvent"), params=[ID("request_id", "the request id of a routed request")])},
        "/v1/workers": {
            "post": op("Register a worker (the last registration wins)", {"202": resp("written", ref("IngestAccepted")), **INGEST_ERRS},
                       body=ref("WorkerRegistration")),
            "get": op("Every worker with its status", {"200": resp("workers", ref("Workers")), **errors("401")}),
        },
        "/v1/workers/{worker_id}": {"delete": op("Deregister a worker and purge its cached blocks", {
            "202": resp("tombstone written", ref("IngestAccepted")), **errors("401", "404", "421", "422", "503")},
            params=[ID("worker_id", "a worker id")])},
        "/v1/events/kv": {"post": op("KV cache events of one worker", {"202": resp("written", ref("IngestAccepted")), **INGEST_ERRS},
                                     body=ref("KvEvents"))},
        "/v1/events/load": {"post": op("A load sample of one worker", {"202": resp("written", ref("IngestAccepted")), **INGEST_ERRS},
                                       body=ref("LoadSample"))},
        "/v1/state": {"get": op("Offsets applied, lag, state digest, snapshot", {"200": resp("state", ref("State")), **errors("401", "503")})},
        "/healthz": {"get": op("Liveness", {"200": resp("alive", ref("Health")), **errors()})},
        "/readyz": {"get": op("Readiness: 200 only when the lag is within bound", {"200": resp("ready", ref("Ready")),
                                                                                  "503": resp("lagging", ref("Ready")), **errors()})},
        "/metrics": {"get": op("Prometheus metrics", {"200": resp("text exposition", {"type": "string"}, "text/plain"), **errors()})},
        "/openapi.json": {"get": op("This document", {"200": resp("OpenAPI 3.0", {"type": "object"}), **errors()})},
    },
    "security": [{"bearer": []}, {}],
}

args.out.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
print(f"wrote {args.out}")
