package door

import (
	"bytes"
	"encoding/json"
)

// The disaggregated path is vLLM's NixlConnector exchange, as vLLM's own
// proxy drives it (tests/v1/kv_connector/nixl_integration/
// toy_proxy_server.py, vllm-project/vllm commit 030ea52e): the prefill
// worker gets the request with do_remote_decode, one output token and no
// streaming; its answer's kv_transfer_params (where its KV blocks are)
// go with the client's original request to the decode worker, which pulls
// the blocks instead of computing the prompt again. Both legs carry the
// same X-Request-Id.

// prefillRequestParams are the kv_transfer_params of the prefill leg.
var prefillRequestParams = json.RawMessage(`{"do_remote_decode":true,"do_remote_prefill":false,"remote_engine_id":null,"remote_block_ids":null,"remote_host":null,"remote_port":null}`)

// prefillBody is the prefill leg: the client's request with stream off,
// max_tokens 1 (and max_completion_tokens 1 when present), no
// stream_options, no min_tokens / min_completion_tokens (a one-token
// answer cannot honour them), asking for a remote decode.
func prefillBody(r *request) ([]byte, error) {
	set := map[string]any{
		"stream": false, "max_tokens": 1, "stream_options": nil,
		"min_tokens": nil, "min_completion_tokens": nil,
		"kv_transfer_params": prefillRequestParams,
	}
	if _, ok := r.fields["max_completion_tokens"]; ok {
		set["max_completion_tokens"] = 1
	}
	return r.body(set)
}

// decodeBody is the decode leg (or the local path, kv nil): the client's
// request, with the prefill's kv_transfer_params. A streamed request asks
// for the final usage chunk so the door counts output tokens exactly; the
// door drops that chunk when the client did not ask for it.
func decodeBody(r *request, kv json.RawMessage) ([]byte, error) {
	// A client's kv_transfer_params are refused by parseRequest; a null
	// one is dropped here, so the local path never carries any.
	set := map[string]any{fieldKVTransfer: nil}
	if kv != nil {
		set[fieldKVTransfer] = kv
	}
	if r.stream {
		so := map[string]json.RawMessage{}
		if raw, ok := present(r.fields, "stream_options"); ok {
			_ = json.Unmarshal(raw, &so) // an object: parseRequest checked it
		}
		so["include_usage"] = json.RawMessage("true")
		set["stream_options"] = so
	}
	return r.body(set)
}

// prefillAnswer reads the prefill leg's answer: its top-level
// kv_transfer_params, nil when the engine gave none (the decode worker then
// computes the prompt itself, as vLLM's proxy does). A body that is not a
// JSON object, or params that are not an object, are refused.
func prefillAnswer(body []byte) (json.RawMessage, bool) {
	var j struct {
		KV json.RawMessage `json:"kv_transfer_params"`
	}
	if err := json.Unmarshal(body, &j); err != nil {
		return nil, false
	}
	kv := bytes.TrimSpace(j.KV)
	switch {
	case len(kv) == 0 || string(kv) == "null":
		return nil, true
	case kv[0] != '{':
		return nil, false
	}
	return kv, true
}
