package door

import (
	"bytes"
	"encoding/json"
	"slices"
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

// prefillBody appends the prefill leg to dst: the client's request with stream off,
// max_tokens 1 (and max_completion_tokens 1 when present), no
// stream_options, no min_tokens / min_completion_tokens (a one-token
// answer cannot honour them), asking for a remote decode.
func prefillBody(dst []byte, r *request) ([]byte, error) {
	one := []byte("1")
	edits := []edit{
		{fStream, []byte("false")}, {fMaxTokens, one}, {fStreamOptions, nil},
		{fMinTokens, nil}, {fMinCompletionTokens, nil}, {fKVTransfer, prefillRequestParams},
	}
	if r.fields.has(fMaxCompletionTokens) {
		edits = append(edits, edit{fMaxCompletionTokens, one})
	}
	return r.fields.render(dst, edits)
}

// decodeBody appends the decode leg (or the local path, kv nil): the client's
// request, with the prefill's kv_transfer_params. A streamed request asks
// for the final usage chunk so the door counts output tokens exactly; the
// door drops that chunk when the client did not ask for it.
func decodeBody(dst []byte, r *request, kv json.RawMessage) ([]byte, error) {
	// A client's kv_transfer_params are refused by parseRequest; a null
	// one is dropped here, so the local path never carries any.
	edits := make([]edit, 0, 2)
	edits = append(edits, edit{fKVTransfer, kv})
	if r.stream {
		so, _ := r.fields.present(fStreamOptions)
		if so, changed := withIncludeUsage(so); changed {
			edits = append(edits, edit{fStreamOptions, so})
		}
	}
	return r.fields.render(dst, edits)
}

var includeUsageOnly = []byte(`{"include_usage":true}`)

// withIncludeUsage is a request's stream_options (an object, or nil when
// absent, as parseRequest checked) with include_usage true, and whether
// that changes it.
func withIncludeUsage(so []byte) ([]byte, bool) {
	if so == nil {
		return includeUsageOnly, true
	}
	var usage []byte
	exact := true
	objectFields(so, 0, func(key, v []byte) bool {
		switch {
		case slices.Contains(key, '\\'):
			exact = false
		case string(key) == "include_usage":
			exact = exact && usage == nil
			usage = v
		}
		return true
	})
	switch {
	case exact && usage != nil && string(usage) == "true":
		return so, false
	case exact && usage == nil:
		// Appended: the object's members, then include_usage.
		out := make([]byte, 0, len(so)+len(includeUsageOnly))
		out = append(out, bytes.TrimRight(so[:len(so)-1], " \t\r\n")...)
		if out[len(out)-1] != '{' {
			out = append(out, ',')
		}
		return append(out, includeUsageOnly[1:]...), true
	}
	// Rare spellings go through encoding/json, which then decides.
	m := map[string]json.RawMessage{}
	_ = json.Unmarshal(so, &m)
	m["include_usage"] = json.RawMessage("true")
	out, _ := json.Marshal(m)
	return out, true
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
