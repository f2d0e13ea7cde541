// Package door is pdrouter's OpenAI-compatible front door: an ordinary
// OpenAI client pointed at http://<router>/v1 gets its completions routed,
// with conditional disaggregation, and every request's decision audited and
// its outcome measured.
//
// For each POST /v1/completions or /v1/chat/completions the door gets the
// prompt's token ids (from the request, or from a decode engine's /tokenize
// through a bounded cache), asks the router for a decision (in-process: the
// API's own decision path, which makes the decision durable before it
// answers), and forwards the request to the engines the decision names:
// straight to the decode worker for a local prefill, or through vLLM's
// NixlConnector exchange for a remote one (handshake.go). It measures TTFT,
// mean inter-token latency and output tokens as the client sees them and
// writes them to the outcomes topic through the same path as
// POST /v1/requests/{id}/events, so the router's accounting is freed and
// each outcome joins its decision.
//
// The door holds no state of the fleet: it depends on three small
// interfaces (deps.go) that the API implements, so it can be tested against
// real HTTP engines with in-memory deciders and served by the API behind
// the same authentication.
//
// Every input is bounded: the client's body, messages and prompt ids, and
// what engines answer (headers, line length, chunk shape, body size, connect, first
// byte and total time). Errors use OpenAI's shape,
// {"error":{"message","type","param","code"}}, not the API's, because these
// endpoints are called by OpenAI clients.
package door
