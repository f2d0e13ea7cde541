// Package registration holds the JSON body of POST /v1/workers, so that the
// API and its clients (the Kubernetes pod watcher in discovery/) share one
// definition of the wire format instead of two that can drift apart. It
// imports nothing, so a client takes the type without the router's
// dependencies.
//
// The bounds of each field are the API's (docs/api.md, "Workers"); the API
// checks them on every request.
package registration

// Request is the body of POST /v1/workers. Absent and zero are kept apart
// for the capacity fields, as the API does.
type Request struct {
	WorkerID            string  `json:"worker_id"`
	Pool                string  `json:"pool"`
	Model               string  `json:"model"`
	BlockSize           uint32  `json:"block_size"`
	TotalKVBlocks       *uint64 `json:"total_kv_blocks,omitempty"`
	MaxNumBatchedTokens *uint64 `json:"max_num_batched_tokens,omitempty"`
	KVEventsEndpoint    string  `json:"kv_events_endpoint,omitempty"`
	KVReplayEndpoint    string  `json:"kv_replay_endpoint,omitempty"`
	KVEventsTopic       string  `json:"kv_events_topic,omitempty"`
	MetricsURL          string  `json:"metrics_url,omitempty"`
	HTTPURL             string  `json:"http_url,omitempty"`
	DPSize              uint32  `json:"dp_size,omitempty"`
	Engine              string  `json:"engine,omitempty"`
}

// The pools a worker registers in.
const (
	PoolPrefill = "prefill"
	PoolDecode  = "decode"
)

// Engines returns the values of Request.Engine the API accepts besides ""
// (unspecified), matched without regard to case.
func Engines() []string { return []string{"vllm", "sglang", "trtllm", "sim"} }
