package sim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/pdrouter/pdrouter/internal/textcut"
)

// The request side of the engines' OpenAI-compatible API: the bodies of POST
// /v1/completions, /v1/chat/completions and /tokenize as vLLM's OpenAI server reads
// them (vLLM's protocol.py; the P/D fields as NixlConnector and vLLM's
// toy_proxy_server.py use them, vllm-project/vllm commit 030ea52e). Fields the
// simulator has no use for (temperature, top_p, stop, …) are accepted and ignored, as
// vLLM ignores the ones a model does not need; fields it cannot honour (n > 1, batched
// prompts) are refused with 400 so that a caller never gets a silently different
// answer.

// DefaultMaxTokens is the completion length when a request names none: 16, the
// legacy OpenAI completions default. (vLLM fills the rest of the context instead,
// which for a simulated model is only a long wait.)
const DefaultMaxTokens = 16

// maxRequestIDLen caps the X-Request-Id an engine adopts as its request id.
const maxRequestIDLen = 256

// The reasons an engine refuses a request: the `code` of its OpenAI error body and
// the reason label of pdrouter_rejected_total{entry="sim_http"}. Fixed strings.
const (
	rejectBodyTooLarge   = "body_too_large"
	rejectInvalidJSON    = "invalid_json"
	rejectInvalidField   = "invalid_field"
	rejectPromptTooLong  = "context_length_exceeded"
	rejectUnknownModel   = "model_not_found"
	rejectRequestIDLong  = "request_id_too_long"
	rejectUnsupported    = "unsupported"
	rejectMethodNotAllow = "method_not_allowed"
)

// engineRejectReasons lists every reason, for rejects.Init.
var engineRejectReasons = []string{rejectBodyTooLarge, rejectInvalidJSON, rejectInvalidField, rejectPromptTooLong,
	rejectUnknownModel, rejectRequestIDLong, rejectUnsupported, rejectMethodNotAllow}

// apiError is a refusal: an HTTP status, the reason (code) and a message for people.
type apiError struct {
	status int
	code   string
	param  string
	msg    string
}

func (e *apiError) Error() string { return e.msg }

func badRequest(code, param, format string, args ...any) *apiError {
	return &apiError{status: 400, code: code, param: param, msg: fmt.Sprintf(format, args...)}
}

// KVTransferParams is the kv_transfer_params object of NixlConnector's P/D exchange:
// what a proxy sends the prefill engine (DoRemoteDecode), what the prefill engine
// answers and the proxy forwards to the decode engine (DoRemotePrefill and the
// remote_* fields).
type KVTransferParams struct {
	DoRemoteDecode  bool    `json:"do_remote_decode"`
	DoRemotePrefill bool    `json:"do_remote_prefill"`
	RemoteEngineID  *string `json:"remote_engine_id"`
	RemoteBlockIDs  []int64 `json:"remote_block_ids"`
	RemoteRequestID *string `json:"remote_request_id,omitempty"`
	RemoteHost      *string `json:"remote_host"`
	RemotePort      *int    `json:"remote_port"`
	TPSize          int     `json:"tp_size,omitempty"`
}

// genRequest is a parsed completion or chat completion request.
type genRequest struct {
	chat   bool
	model  string
	prompt []uint32
	// maxTokens is the exact output length: the simulated model never stops early,
	// so min_tokens (accepted, validated) changes nothing.
	maxTokens    int
	stream       bool
	includeUsage bool
	// kv is the request's kv_transfer_params; nil when absent or unreadable (vLLM
	// then serves the request locally, and so does the simulator).
	kv *KVTransferParams
	// seed is the sampling seed (OpenAI's seed, a 64-bit integer), nil when
	// absent. As with vLLM's seeded sampling, it makes the output reproducible:
	// the output tokens are the seed's sequence (Request.Output), whatever the
	// prompt, so a driver replaying a multi-turn workload gets the very tokens
	// the workload's next turn resends. Without it the output is seeded by the
	// prompt.
	seed *uint64
}

// wireGenRequest is the union of the completion and chat bodies. Numbers are
// json.Number so that a fractional or huge value is an error naming the field, not a
// silent truncation.
type wireGenRequest struct {
	Model               string          `json:"model"`
	Prompt              json.RawMessage `json:"prompt"`
	Messages            json.RawMessage `json:"messages"`
	MaxTokens           *json.Number    `json:"max_tokens"`
	MaxCompletionTokens *json.Number    `json:"max_completion_tokens"`
	MinTokens           *json.Number    `json:"min_tokens"`
	MinCompletionTokens *json.Number    `json:"min_completion_tokens"`
	N                   *json.Number    `json:"n"`
	Stream              *bool           `json:"stream"`
	StreamOptions       *struct {
		IncludeUsage *bool `json:"include_usage"`
	} `json:"stream_options"`
	AddGenerationPrompt *bool           `json:"add_generation_prompt"`
	KVTransferParams    json.RawMessage `json:"kv_transfer_params"`
	Seed                *json.Number    `json:"seed"`
}

// parseLimits are the engine's bounds on a request.
type parseLimits struct {
	vocab       int
	maxModelLen int
	model       string
}

// decodeBody decodes one JSON object; trailing data is an error.
func decodeBody(body []byte, v any) *apiError {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		return badRequest(rejectInvalidJSON, "", "invalid JSON body: %v", err)
	}
	if dec.More() {
		return badRequest(rejectInvalidJSON, "", "invalid JSON body: data after the object")
	}
	return nil
}

// parseGenRequest parses a /v1/completions (chat false) or /v1/chat/completions body.
func parseGenRequest(body []byte, chat bool, lim parseLimits) (*genRequest, *apiError) {
	var w wireGenRequest
	if err := decodeBody(body, &w); err != nil {
		return nil, err
	}
	if w.Model != "" && w.Model != lim.model {
		return nil, &apiError{status: 404, code: rejectUnknownModel, param: "model",
			msg: fmt.Sprintf("The model `%s` does not exist.", textcut.Truncate(w.Model, 200))}
	}
	g := &genRequest{chat: chat, model: lim.model}
	if n, err := optInt(w.N, "n", 1); err != nil {
		return nil, err
	} else if n != 1 {
		return nil, &apiError{status: 400, code: rejectUnsupported, param: "n", msg: "the simulated engine generates one choice per request (n must be 1)"}
	}
	var err *apiError
	if chat {
		msgs, perr := parseMessages(w.Messages)
		if perr != nil {
			return nil, perr
		}
		g.prompt = Tokenize(RenderChat(msgs, true), lim.vocab)
	} else if g.prompt, err = parsePrompt(w.Prompt, lim.vocab); err != nil {
		return nil, err
	}
	maxField, minField := w.MaxTokens, w.MinTokens
	maxName, minName := "max_tokens", "min_tokens"
	if chat && w.MaxCompletionTokens != nil {
		maxField, maxName = w.MaxCompletionTokens, "max_completion_tokens"
	}
	if chat && w.MinCompletionTokens != nil {
		minField, minName = w.MinCompletionTokens, "min_completion_tokens"
	}
	maxTokens, err := optInt(maxField, maxName, DefaultMaxTokens)
	if err != nil {
		return nil, err
	}
	if maxTokens < 1 {
		return nil, badRequest(rejectInvalidField, maxName, "%s must be at least 1, got %d.", maxName, maxTokens)
	}
	minTokens, err := optInt(minField, minName, 0)
	if err != nil {
		return nil, err
	}
	if minTokens < 0 || minTokens > maxTokens {
		return nil, badRequest(rejectInvalidField, minName, "%s must be between 0 and %s (%d), got %d.", minName, maxName, maxTokens, minTokens)
	}
	if len(g.prompt)+maxTokens > lim.maxModelLen {
		return nil, badRequest(rejectPromptTooLong, maxName,
			"This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the prompt, %d in the completion). Please reduce the length of the prompt or completion.",
			lim.maxModelLen, len(g.prompt)+maxTokens, len(g.prompt), maxTokens)
	}
	g.maxTokens = maxTokens
	g.stream = w.Stream != nil && *w.Stream
	g.includeUsage = g.stream && w.StreamOptions != nil && w.StreamOptions.IncludeUsage != nil && *w.StreamOptions.IncludeUsage
	g.kv = parseKVParams(w.KVTransferParams)
	if w.Seed != nil {
		v, perr := strconv.ParseInt(string(*w.Seed), 10, 64)
		if perr != nil {
			return nil, badRequest(rejectInvalidField, "seed", "seed must be a 64-bit integer, got %s.", textcut.Truncate(string(*w.Seed), 40))
		}
		u := uint64(v)
		g.seed = &u
	}
	return g, nil
}

// parseKVParams reads kv_transfer_params leniently: anything unreadable is treated as
// absent, as a failed transfer is, so the request is served locally.
func parseKVParams(raw json.RawMessage) *KVTransferParams {
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil
	}
	var kv KVTransferParams
	if json.Unmarshal(raw, &kv) != nil {
		return nil
	}
	if !kv.DoRemoteDecode && !kv.DoRemotePrefill {
		return nil
	}
	return &kv
}

// optInt reads an optional integer field; absent or null gives def.
func optInt(n *json.Number, name string, def int) (int, *apiError) {
	if n == nil || *n == "" {
		return def, nil
	}
	v, err := strconv.ParseInt(string(*n), 10, 32)
	if err != nil {
		return 0, badRequest(rejectInvalidField, name, "%s must be an integer, got %s.", name, textcut.Truncate(string(*n), 40))
	}
	return int(v), nil
}

// parsePrompt reads a completion prompt: a string, a list of token ids, or a batch of
// one of either. Batches of more are refused: the engine answers one choice.
func parsePrompt(raw json.RawMessage, vocab int) ([]uint32, *apiError) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, badRequest(rejectInvalidField, "prompt", "prompt is required.")
	}
	var out []uint32
	switch raw[0] {
	case '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, badRequest(rejectInvalidField, "prompt", "prompt: %v", err)
		}
		out = Tokenize(s, vocab)
	case '[':
		var items []json.RawMessage
		if err := json.Unmarshal(raw, &items); err != nil {
			return nil, badRequest(rejectInvalidField, "prompt", "prompt: %v", err)
		}
		if len(items) > 0 {
			if first := bytes.TrimSpace(items[0]); len(first) > 0 && (first[0] == '"' || first[0] == '[') {
				if len(items) != 1 {
					return nil, &apiError{status: 400, code: rejectUnsupported, param: "prompt", msg: "batched prompts are not supported by the simulated engine: send one prompt per request"}
				}
				return parsePrompt(first, vocab)
			}
		}
		out = make([]uint32, 0, len(items))
		for i, it := range items {
			v, err := strconv.ParseInt(string(bytes.TrimSpace(it)), 10, 64)
			if err != nil || v < 0 || v >= int64(vocab) {
				return nil, badRequest(rejectInvalidField, "prompt", "prompt[%d]: token id %s is not an integer in [0, %d).", i, textcut.Truncate(string(it), 40), vocab)
			}
			out = append(out, uint32(v))
		}
	default:
		return nil, badRequest(rejectInvalidField, "prompt", "prompt must be a string or a list of token ids.")
	}
	if len(out) == 0 {
		return nil, badRequest(rejectInvalidField, "prompt", "prompt must not be empty.")
	}
	return out, nil
}

// parseMessages reads chat messages: content is a string, null, or a list of parts
// of which the text parts are used.
func parseMessages(raw json.RawMessage) ([]ChatMessage, *apiError) {
	var msgs []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	}
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, badRequest(rejectInvalidField, "messages", "messages is required.")
	}
	if err := json.Unmarshal(raw, &msgs); err != nil {
		return nil, badRequest(rejectInvalidField, "messages", "messages: %v", err)
	}
	if len(msgs) == 0 {
		return nil, badRequest(rejectInvalidField, "messages", "messages must not be empty.")
	}
	out := make([]ChatMessage, len(msgs))
	for i, m := range msgs {
		if m.Role == "" {
			return nil, badRequest(rejectInvalidField, fmt.Sprintf("messages[%d].role", i), "messages[%d].role is required.", i)
		}
		text, err := contentText(m.Content)
		if err != nil {
			return nil, badRequest(rejectInvalidField, fmt.Sprintf("messages[%d].content", i), "messages[%d].content: %v", i, err)
		}
		out[i] = ChatMessage{Role: m.Role, Content: text}
	}
	return out, nil
}

func contentText(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return "", nil
	}
	if raw[0] == '"' {
		var s string
		err := json.Unmarshal(raw, &s)
		return s, err
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", fmt.Errorf("want a string or a list of content parts")
	}
	var b bytes.Buffer
	for _, p := range parts {
		if p.Type == "text" {
			b.WriteString(p.Text)
		}
	}
	return b.String(), nil
}

// parseTokenizeRequest parses a /tokenize body: a prompt string, or chat messages.
func parseTokenizeRequest(body []byte, lim parseLimits) ([]uint32, *apiError) {
	var w wireGenRequest
	if err := decodeBody(body, &w); err != nil {
		return nil, err
	}
	if w.Model != "" && w.Model != lim.model {
		return nil, &apiError{status: 404, code: rejectUnknownModel, param: "model",
			msg: fmt.Sprintf("The model `%s` does not exist.", textcut.Truncate(w.Model, 200))}
	}
	if len(w.Messages) > 0 {
		msgs, err := parseMessages(w.Messages)
		if err != nil {
			return nil, err
		}
		return Tokenize(RenderChat(msgs, w.AddGenerationPrompt == nil || *w.AddGenerationPrompt), lim.vocab), nil
	}
	raw := bytes.TrimSpace(w.Prompt)
	if len(raw) == 0 || raw[0] != '"' {
		return nil, badRequest(rejectInvalidField, "prompt", "prompt (a string) or messages is required.")
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, badRequest(rejectInvalidField, "prompt", "prompt: %v", err)
	}
	return Tokenize(s, lim.vocab), nil
}
