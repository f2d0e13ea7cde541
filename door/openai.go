package door

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"

	"github.com/pdrouter/pdrouter/internal/textcut"
)

// kind is which OpenAI endpoint a request came to.
type kind int

const (
	completions kind = iota
	chat
)

func (k kind) label() string {
	if k == chat {
		return endpointChat
	}
	return endpointCompletions
}

// path is the engine path of the endpoint, under <http_url>.
func (k kind) path() string {
	if k == chat {
		return "/v1/chat/completions"
	}
	return "/v1/completions"
}

// request is a parsed OpenAI request. The door forwards the client's body
// (fields), changing only what the exchange needs, so a sampling parameter
// it does not know still reaches the engine.
type request struct {
	kind   kind
	fields bodyFields
	model  string
	stream bool
	// includeUsage: the client asked for the final usage chunk.
	includeUsage bool
	// maxTokens is max_tokens (or max_completion_tokens), 0 when absent.
	maxTokens uint32
	// tokenIDs is the prompt when the client gave token ids; else nil and
	// prompt holds the exact bytes of `prompt` (a JSON string) or
	// `messages` (a JSON array), which /tokenize gets.
	tokenIDs []uint32
	prompt   json.RawMessage
}

// limits are the bounds parse applies.
type limits struct {
	maxMessages     int
	maxPromptTokens int
}

// parseError is a refusal with its rejects reason.
type parseError struct {
	*Error
	reason string
}

func refuse(reason string, e *Error) *parseError { return &parseError{Error: e, reason: reason} }

// fieldKVTransfer is the one field of a body only the router sets: an
// engine given kv_transfer_params with do_remote_prefill pulls KV blocks
// from the remote_host and remote_port they name, so a client's own would
// make an engine connect wherever the client says. The door's other
// changes (stream, max_tokens, stream_options, min_tokens on the prefill
// leg; include_usage on the decode leg) overwrite the client's value or
// only bound its request, and X-Request-Id is a header the door sets, not
// one it forwards.
const fieldKVTransfer = "kv_transfer_params"

// maxModelLen bounds the model name, as registrations do.
const maxModelLen = 512

// parseRequest validates an OpenAI body for endpoint k.
func parseRequest(k kind, body []byte, lim limits) (*request, *parseError) {
	fields, ok := scanBody(body)
	if !ok {
		// Said as encoding/json says it.
		var m map[string]json.RawMessage
		return nil, refuse(reasonInvalidJSON, invalid("invalid_json", "", "the body is not a JSON object: "+jsonError(json.Unmarshal(body, &m))))
	}
	r := &request{kind: k, fields: fields}
	if _, ok := r.fields.present(fKVTransfer); ok {
		return nil, refuse(reasonRouterOwned, invalid("router_owned_field", fieldKVTransfer,
			"kv_transfer_params are set by the router (they tell an engine where to pull KV blocks from); a request must not carry them"))
	}
	if err := r.unmarshalField(fModel, &r.model); err != nil {
		return nil, err
	}
	if r.model == "" || len(r.model) > maxModelLen {
		return nil, refuse(reasonInvalidRequest, invalid("invalid_value", "model", fmt.Sprintf("a model name of 1 to %d bytes is required", maxModelLen)))
	}
	if err := r.unmarshalField(fStream, &r.stream); err != nil {
		return nil, err
	}
	var so struct {
		IncludeUsage bool `json:"include_usage"`
	}
	if err := r.unmarshalField(fStreamOptions, &so); err != nil {
		return nil, err
	}
	r.includeUsage = so.IncludeUsage
	for _, f := range []int{fMaxTokens, fMaxCompletionTokens} {
		name := fieldNames[f]
		var n *float64
		if err := r.unmarshalField(f, &n); err != nil {
			return nil, err
		}
		if n == nil {
			continue
		}
		if *n < 1 || *n > math.MaxInt32 || *n != math.Trunc(*n) {
			return nil, refuse(reasonInvalidRequest, invalid("invalid_value", name, fmt.Sprintf("must be an integer in [1, %d]", math.MaxInt32)))
		}
		if r.maxTokens == 0 || uint32(*n) < r.maxTokens {
			r.maxTokens = uint32(*n)
		}
	}
	if k == chat {
		return r, r.parseMessages(lim)
	}
	return r, r.parsePrompt(lim)
}

func (r *request) parseMessages(lim limits) *parseError {
	raw, ok := r.fields.present(fMessages)
	if !ok {
		return refuse(reasonInvalidRequest, invalid("missing_field", "messages", "a chat completion needs messages"))
	}
	var msgs []json.RawMessage
	if err := json.Unmarshal(raw, &msgs); err != nil {
		return refuse(reasonInvalidRequest, invalid("invalid_type", "messages", "must be an array of message objects"))
	}
	if len(msgs) == 0 {
		return refuse(reasonInvalidRequest, invalid("invalid_value", "messages", "is empty"))
	}
	if len(msgs) > lim.maxMessages {
		return refuse(reasonTooManyMsgs, invalid("too_many_messages", "messages", fmt.Sprintf("%d messages; at most %d", len(msgs), lim.maxMessages)))
	}
	for i, m := range msgs {
		if t := bytes.TrimSpace(m); len(t) == 0 || t[0] != '{' {
			return refuse(reasonInvalidRequest, invalid("invalid_type", fmt.Sprintf("messages[%d]", i), "must be an object"))
		}
	}
	r.prompt = raw
	return nil
}

func (r *request) parsePrompt(lim limits) *parseError {
	raw, ok := r.fields.present(fPrompt)
	if !ok {
		return refuse(reasonInvalidRequest, invalid("missing_field", "prompt", "a completion needs a prompt"))
	}
	switch raw[0] {
	case '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return refuse(reasonInvalidRequest, invalid("invalid_type", "prompt", "is not a valid JSON string"))
		}
		if s == "" {
			return refuse(reasonInvalidRequest, invalid("invalid_value", "prompt", "is empty"))
		}
		r.prompt = raw
		return nil
	case '[':
		ids, err := tokenIDs(raw, lim.maxPromptTokens)
		if err != nil {
			return err
		}
		r.tokenIDs = ids
		return nil
	}
	return refuse(reasonInvalidRequest, invalid("invalid_type", "prompt", "must be a string or a list of token ids"))
}

// unmarshalField decodes a field that may be absent or null into v.
func (r *request) unmarshalField(f int, v any) *parseError {
	name := fieldNames[f]
	raw, ok := r.fields.present(f)
	if !ok {
		return nil
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return refuse(reasonInvalidRequest, invalid("invalid_type", name, "has the wrong type: "+jsonError(err)))
	}
	return nil
}

func jsonError(err error) string {
	if err == nil {
		return "null"
	}
	return textcut.Truncate(err.Error(), 200)
}
